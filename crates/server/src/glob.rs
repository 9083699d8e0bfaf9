//! Glob-style matching with Redis's `stringmatchlen` rules: `*`, `?`,
//! `[abc]`, `[^a-z]`, and `\` escapes. Used by KEYS, SCAN MATCH and
//! CONFIG GET.

pub fn matches(pattern: &[u8], text: &[u8], nocase: bool) -> bool {
    // Iterative with one backtrack point for the last `*`: linear in
    // practice and immune to the exponential blow-up of naive recursion.
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    let eq = |a: u8, b: u8| if nocase { a.eq_ignore_ascii_case(&b) } else { a == b };
    // Redis's loop never runs on an empty string: only the empty pattern
    // matches it, not even `*` (KEYS and SCAN special-case a lone `*`).
    if text.is_empty() {
        return pattern.is_empty();
    }
    while t < text.len() {
        if p < pattern.len() {
            match pattern[p] {
                b'*' => {
                    while p < pattern.len() && pattern[p] == b'*' {
                        p += 1;
                    }
                    if p == pattern.len() {
                        return true;
                    }
                    star = Some((p, t));
                    continue;
                }
                b'?' => {
                    p += 1;
                    t += 1;
                    continue;
                }
                b'[' => {
                    if let Some((matched, next)) = class(pattern, p, text[t], nocase) {
                        if matched {
                            p = next;
                            t += 1;
                            continue;
                        }
                    }
                }
                b'\\' if p + 1 < pattern.len() => {
                    if eq(pattern[p + 1], text[t]) {
                        p += 2;
                        t += 1;
                        continue;
                    }
                }
                c => {
                    if eq(c, text[t]) {
                        p += 1;
                        t += 1;
                        continue;
                    }
                }
            }
        }
        match star {
            Some((sp, st)) => {
                p = sp;
                t = st + 1;
                star = Some((sp, st + 1));
            }
            None => return false,
        }
    }
    pattern[p..].iter().all(|&c| c == b'*')
}

/// Matches `c` against the class starting at `pattern[start] == b'['`.
/// Returns whether it matched and the index after the class. An
/// unterminated class extends to the end of the pattern, as in Redis.
fn class(pattern: &[u8], start: usize, c: u8, nocase: bool) -> Option<(bool, usize)> {
    let mut p = start + 1;
    let negate = pattern.get(p) == Some(&b'^');
    if negate {
        p += 1;
    }
    let lower = |b: u8| if nocase { b.to_ascii_lowercase() } else { b };
    let c = lower(c);
    let mut matched = false;
    loop {
        match pattern.get(p) {
            None => {
                // Redis treats a missing ']' as ending the class at the last char.
                p = pattern.len();
                break;
            }
            Some(b']') => {
                p += 1;
                break;
            }
            Some(b'\\') if p + 1 < pattern.len() => {
                if lower(pattern[p + 1]) == c {
                    matched = true;
                }
                p += 2;
            }
            Some(&lo) if pattern.get(p + 1) == Some(&b'-') && p + 2 < pattern.len() => {
                let (mut a, mut b) = (lower(lo), lower(pattern[p + 2]));
                if a > b {
                    std::mem::swap(&mut a, &mut b);
                }
                if (a..=b).contains(&c) {
                    matched = true;
                }
                p += 3;
            }
            Some(&x) => {
                if lower(x) == c {
                    matched = true;
                }
                p += 1;
            }
        }
    }
    Some((matched != negate, p))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn redis_glob_rules() {
        let cases: &[(&str, &str, bool)] = &[
            ("*", "anything", true),
            ("h?llo", "hello", true),
            ("h?llo", "hllo", false),
            ("h*llo", "heeeello", true),
            ("h[ae]llo", "hallo", true),
            ("h[ae]llo", "hillo", false),
            ("h[^e]llo", "hallo", true),
            ("h[^e]llo", "hello", false),
            ("h[a-b]llo", "hbllo", true),
            ("h\\*llo", "h*llo", true),
            ("h\\*llo", "hello", false),
            ("key:*:x", "key:1:2:x", true),
            ("*a*b*c", "xaxbxcx", false),
            ("", "", true),
            ("a", "", false),
            ("*", "", false),
            ("a*", "a", true),
        ];
        for (p, t, want) in cases {
            assert_eq!(matches(p.as_bytes(), t.as_bytes(), false), *want, "{p} ~ {t}");
        }
        assert!(matches(b"HELLO", b"hello", true));
    }

    #[test]
    fn pathological_patterns_stay_fast() {
        let text = vec![b'a'; 10_000];
        assert!(!matches(b"*a*a*a*a*a*a*a*a*b", &text, false));
    }
}
