//! LOLWUT: the version, and for `VERSION 5` and `VERSION 6` the computer
//! art Redis draws for them (Georg Nees's *Schotter* in Braille dots; a
//! city skyline in terminal colours), as Redis 7.0's `lolwutCommand`.
//! Every other version is Redis's default: the version line alone.

use rand::Rng;

use super::parse::{eq, i64_arg};
use super::{cmd, flags::*, CmdResult, CommandSpec, Ctx, Keys};

pub static COMMANDS: &[CommandSpec] = &[cmd("lolwut", -1, READONLY | FAST, Keys::None, "server", lolwut)
    .doc("Display some computer art and the Redis version", "5.0.0")];

/// LOLWUT [VERSION v] [art arguments...].
fn lolwut(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> CmdResult {
    let (version, args) = if argv.len() >= 3 && eq(argv[1], "version") {
        // Redis prints the number as a C `unsigned int`.
        (Some(i64_arg(argv[2])? as u32), &argv[3..])
    } else {
        (None, &argv[1..])
    };
    let version_line = format!("Redis ver. {}\n", crate::server::REDIS_VERSION);
    let text = match version {
        Some(5) => {
            let cols = arg_in(args, 0, 66, 1000)?;
            let per_row = arg_in(args, 1, 8, 200)?;
            let per_col = arg_in(args, 2, 12, 200)?;
            let canvas = schotter(&mut rand::thread_rng(), cols, per_row, per_col);
            format!("{}\nGeorg Nees - schotter, plotter on paper, 1968. {version_line}", canvas.braille())
        }
        Some(6) => {
            let cols = arg_in(args, 0, 80, 1000)?;
            let rows = arg_in(args, 1, 20, 1000)?;
            let mut canvas = Canvas::new(cols, rows, WHITE);
            skyline(&mut rand::thread_rng(), &mut canvas);
            format!(
                "{}\nDedicated to the 8 bit game developers of past and present.\nOriginal 8 bit image from Plaguemon \
                 by hikikomori. {version_line}",
                canvas.coloured()
            )
        }
        _ => version_line,
    };
    ctx.out.verbatim("txt", text.as_bytes());
    Ok(())
}

/// Argument `i` of the art, `default` when absent, clamped to `1..=max`.
fn arg_in(args: &[&[u8]], i: usize, default: i64, max: i64) -> Result<i32, super::CmdError> {
    let n = args.get(i).map(|a| i64_arg(a)).transpose()?.unwrap_or(default);
    Ok(n.clamp(1, max) as i32)
}

/// A grid of pixels, each a colour number.
struct Canvas {
    width: i32,
    height: i32,
    pixels: Vec<u8>,
}

const BLACK: u8 = 0;
const WHITE: u8 = 3;

impl Canvas {
    fn new(width: i32, height: i32, colour: u8) -> Canvas {
        Canvas { width, height, pixels: vec![colour; (width * height) as usize] }
    }

    fn inside(&self, x: i32, y: i32) -> bool {
        (0..self.width).contains(&x) && (0..self.height).contains(&y)
    }

    fn set(&mut self, x: i32, y: i32, colour: u8) {
        if self.inside(x, y) {
            self.pixels[(x + y * self.width) as usize] = colour;
        }
    }

    /// Outside the canvas is colour 0.
    fn get(&self, x: i32, y: i32) -> u8 {
        if self.inside(x, y) { self.pixels[(x + y * self.width) as usize] } else { 0 }
    }

    /// Bresenham's line, both ends drawn.
    fn line(&mut self, (mut x1, mut y1): (i32, i32), (x2, y2): (i32, i32), colour: u8) {
        let (dx, dy) = ((x2 - x1).abs(), (y2 - y1).abs());
        let (sx, sy) = (if x1 < x2 { 1 } else { -1 }, if y1 < y2 { 1 } else { -1 });
        let mut err = dx - dy;
        loop {
            self.set(x1, y1, colour);
            if (x1, y1) == (x2, y2) {
                return;
            }
            let e2 = err * 2;
            if e2 > -dy {
                err -= dy;
                x1 += sx;
            }
            if e2 < dx {
                err += dx;
                y1 += sy;
            }
        }
    }

    /// A square of side `size` centred on (x, y), turned by `angle`
    /// radians. Single precision where Redis's C has it, so that the same
    /// arguments draw the same pixels.
    fn square(&mut self, x: i32, y: i32, size: f32, angle: f32, colour: u8) {
        // The corners lie on a circle of radius side / sqrt(2), with
        // Redis's sqrt(2) to ten places, so that ties round as its do.
        #[allow(clippy::approx_constant)]
        let radius = ((f64::from(size) / 1.414_213_562_3) as f32 as f64).round();
        let mut k = (std::f64::consts::FRAC_PI_4 + f64::from(angle)) as f32;
        let mut corners = [(0, 0); 4];
        for corner in &mut corners {
            let px = (f64::from(k).sin() * radius + f64::from(x)).round() as i32;
            let py = (f64::from(k).cos() * radius + f64::from(y)).round() as i32;
            *corner = (px, py);
            k = (f64::from(k) + std::f64::consts::FRAC_PI_2) as f32;
        }
        for j in 0..4 {
            self.line(corners[j], corners[(j + 1) % 4], colour);
        }
    }

    /// Each 2x4 block of pixels as one Braille character (U+2800 and the
    /// block's dots as its low byte), a line per four rows.
    fn braille(&self) -> String {
        let mut text = String::new();
        for y in (0..self.height).step_by(4) {
            for x in (0..self.width).step_by(2) {
                let dots = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2), (0, 3), (1, 3)];
                let byte = dots.iter().enumerate().fold(0u32, |byte, (bit, (dx, dy))| {
                    byte | (u32::from(self.get(x + dx, y + dy) != 0) << bit)
                });
                text.push(char::from_u32(0x2800 + byte).unwrap_or(' '));
            }
            if y != self.height - 1 {
                text.push('\n');
            }
        }
        text
    }

    /// Each pixel as a space on its colour (ANSI escapes, foreground and
    /// background both, as Redis sets them).
    fn coloured(&self) -> String {
        let mut text = String::new();
        for y in 0..self.height {
            for x in 0..self.width {
                let escape = match self.get(x, y) {
                    1 => "0;90;100m",
                    2 => "0;37;47m",
                    3 => "0;97;107m",
                    _ => "0;30;40m",
                };
                text.push_str(&format!("\x1b[{escape} \x1b[0m"));
            }
            if y != self.height - 1 {
                text.push('\n');
            }
        }
        text
    }
}

/// C's `rand()`, 0..=RAND_MAX (glibc's 2^31 - 1).
fn c_rand(rng: &mut impl Rng) -> i32 {
    rng.gen_range(0..=i32::MAX)
}

/// Schotter: `per_col` rows of `per_row` squares over `cols` characters,
/// turned and moved at random more with each row past the second.
fn schotter(rng: &mut impl Rng, cols: i32, per_row: i32, per_col: i32) -> Canvas {
    let width = cols * 2;
    let padding = if width > 4 { 2 } else { 0 };
    let side = (width - padding * 2) as f32 / per_row as f32;
    let height = (side * per_col as f32 + (padding * 2) as f32) as i32;
    let mut canvas = Canvas::new(width, height, BLACK);
    for y in 0..per_col {
        for x in 0..per_row {
            let mut sx = x as f32 * side + side / 2.0 + padding as f32;
            let mut sy = y as f32 * side + side / 2.0 + padding as f32;
            // Redis truncates the centre to an int before moving it.
            (sx, sy) = (sx.trunc(), sy.trunc());
            let mut angle = 0.0;
            if y > 1 {
                let mut r = [0f32; 3];
                for r in &mut r {
                    *r = c_rand(rng) as f32 / i32::MAX as f32 / per_col as f32 * y as f32;
                }
                for r in &mut r {
                    if c_rand(rng) % 2 == 1 {
                        *r = -*r;
                    }
                }
                angle = r[0];
                sx = (sx + r[1] * side / 3.0).trunc();
                sy = (sy + r[2] * side / 3.0).trunc();
            }
            canvas.square(sx as i32, sy as i32, side, angle, 1);
        }
    }
    canvas
}

struct Skyscraper {
    xoff: i32,
    width: i32,
    height: i32,
    windows: bool,
    colour: u8,
}

/// Draws a skyscraper from the canvas's bottom up: a roof two pixels
/// narrower on each side and, with `windows`, windows two pixels wide in
/// the other two colours.
fn skyscraper(rng: &mut impl Rng, canvas: &mut Canvas, s: &Skyscraper) {
    let bottom = canvas.height - 1;
    let top = bottom - s.height + 1;
    for y in (top..=bottom).rev() {
        for x in s.xoff..s.xoff + s.width {
            if y == top && (x <= s.xoff + 1 || x >= s.xoff + s.width - 2) {
                continue;
            }
            let mut colour = s.colour;
            let inner = x > s.xoff + 1 && x < s.xoff + s.width - 2 && y > top + 1 && y < bottom - 1;
            if s.windows && inner {
                let (relx, rely) = (x - (s.xoff + 1), y - (top + 1));
                if (relx / 2) % 2 != 0 && rely % 2 != 0 {
                    loop {
                        colour = 1 + (c_rand(rng) % 2) as u8;
                        if colour != s.colour {
                            break;
                        }
                    }
                    // A window's two pixels share its colour.
                    if relx % 2 != 0 {
                        colour = canvas.get(x - 1, y);
                    }
                }
            }
            canvas.set(x, y, colour);
        }
    }
}

/// Two rows of grey towers behind, then black towers with windows.
fn skyline(rng: &mut impl Rng, canvas: &mut Canvas) {
    let h = canvas.height;
    for colour in [2u8, 1] {
        let mut offset = -10;
        while offset < canvas.width {
            offset += c_rand(rng) % 8;
            let width = 10 + c_rand(rng) % 9;
            let height = if colour == 2 { h / 2 + (c_rand(rng) % h) / 2 } else { h / 2 + (c_rand(rng) % h) / 3 };
            skyscraper(rng, canvas, &Skyscraper { xoff: offset, width, height, windows: false, colour });
            offset += if colour == 2 { width / 2 } else { width + 1 };
        }
    }
    let mut offset = -10;
    while offset < canvas.width {
        offset += c_rand(rng) % 8;
        let mut width = 5 + c_rand(rng) % 14;
        if width % 4 != 0 {
            width += width % 3;
        }
        let height = h / 3 + (c_rand(rng) % h) / 2;
        skyscraper(rng, canvas, &Skyscraper { xoff: offset, width, height, windows: true, colour: BLACK });
        offset += width + 5;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_rows_of_schotter_are_plain_squares() {
        // Rows past the second move at random; the first two never do.
        let canvas = schotter(&mut rand::thread_rng(), 4, 1, 1);
        assert_eq!((canvas.width, canvas.height), (8, 8));
        let text = canvas.braille();
        assert_eq!(text.lines().count(), 2);
        assert!(text.chars().any(|c| c != '\n' && c != '\u{2800}'), "a square is drawn: {text}");
        // A 1x1 square grid at 66 columns is as wide as Redis's.
        assert_eq!(schotter(&mut rand::thread_rng(), 66, 8, 2).braille().lines().next().map(|l| l.chars().count()), Some(66));
    }

    #[test]
    fn the_skyline_fills_the_canvas_with_its_four_colours_only() {
        let mut canvas = Canvas::new(80, 20, WHITE);
        skyline(&mut rand::thread_rng(), &mut canvas);
        assert!(canvas.pixels.iter().all(|&c| c <= WHITE));
        assert!(canvas.pixels.contains(&BLACK), "the foreground towers are drawn");
        assert_eq!(canvas.coloured().lines().count(), 20);
    }
}
