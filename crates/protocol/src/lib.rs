//! Pure parsers and encoders for Keel's wire protocols.
