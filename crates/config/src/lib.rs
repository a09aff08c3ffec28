//! The TOML files podnet reads — a qualification plan, the agent's health thresholds — and the
//! one error they give: the file could not be read, or it is not valid at a line, naming the
//! key. Each file's own checks (a value out of range, a key that does not apply) report through
//! [`TomlFile::invalid_at`] so that every message points where an operator must edit.
//!
//! ```
//! #[derive(serde::Deserialize)]
//! #[serde(deny_unknown_fields)]
//! struct Plan { retries: u32 }
//! let f = config::TomlFile::new("plan.toml", "retries = 7\n");
//! let plan: Plan = f.parse()?;
//! let e = f.invalid_at("retries", format!("`retries` = {}: 0 or 1", plan.retries));
//! assert_eq!(e.to_string(), "plan.toml:1: `retries` = 7: 0 or 1");
//! # Ok::<(), config::FileError>(())
//! ```

#![forbid(unsafe_code)]

use std::path::Path;

/// Why a file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// The file could not be read.
    #[error("{path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid.
    #[error("{path}:{line}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// The line (1-based; 0 when unknown).
        line: usize,
        /// What is wrong, naming the key.
        message: String,
    },
}

/// A TOML file's text and the name errors give it.
#[derive(Debug, Clone, Copy)]
pub struct TomlFile<'a> {
    path: &'a str,
    text: &'a str,
}

/// The largest file podnet reads as configuration: a plan for a thousand hosts is ~100 KiB.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// Reads the file at `path`: its text, or [`FileError::Read`]. Only a regular file of at most
/// [`MAX_FILE_BYTES`] is read — not a FIFO that never ends, a device such as `/dev/zero`, or a
/// file that is not configuration — and nothing is read past the cap.
pub fn read(path: &Path) -> Result<String, FileError> {
    use std::io::Read as _;
    let fail = |source| FileError::Read { path: path.display().to_string(), source };
    let invalid = |m: String| fail(std::io::Error::new(std::io::ErrorKind::InvalidData, m));
    // The type is looked at before opening: opening a FIFO waits for a writer.
    let meta = std::fs::metadata(path).map_err(fail)?;
    if !meta.is_file() {
        return Err(invalid("not a regular file (a TOML file is expected)".into()));
    }
    let f = std::fs::File::open(path).map_err(fail)?;
    let mut bytes = Vec::new();
    f.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes).map_err(fail)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(invalid(format!(
            "larger than {} KiB: not a configuration file",
            MAX_FILE_BYTES >> 10
        )));
    }
    String::from_utf8(bytes)
        .map_err(|e| invalid(format!("not UTF-8 text (byte {})", e.utf8_error().valid_up_to())))
}

impl<'a> TomlFile<'a> {
    /// The text `text`, called `path` in errors.
    pub fn new(path: &'a str, text: &'a str) -> TomlFile<'a> {
        TomlFile { path, text }
    }

    /// Deserializes the whole file; a syntax error, an unknown key (with
    /// `deny_unknown_fields`) or a value of the wrong type is [`FileError::Invalid`] at its
    /// line.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, FileError> {
        toml::from_str(self.text).map_err(|e| {
            let line = e.span().map_or(0, |s| self.line_of_offset(s.start));
            self.invalid(line, e.message().trim().to_string())
        })
    }

    /// [`FileError::Invalid`] at `line`.
    pub fn invalid(&self, line: usize, message: String) -> FileError {
        FileError::Invalid { path: self.path.to_string(), line, message }
    }

    /// [`FileError::Invalid`] at the line that sets `key` (0 when none does).
    pub fn invalid_at(&self, key: &str, message: String) -> FileError {
        self.invalid(self.line_of_key(key), message)
    }

    /// The first line that sets `key` (`key = …`), 1-based; 0 when none does.
    pub fn line_of_key(&self, key: &str) -> usize {
        self.find(|rest| rest.starts_with('='), key)
    }

    /// The first line that sets `key` to something containing `value`; 0 when none does.
    pub fn line_of_value(&self, key: &str, value: &str) -> usize {
        self.find(|rest| rest.starts_with('=') && rest.contains(value), key)
    }

    fn find(&self, after_key: impl Fn(&str) -> bool, key: &str) -> usize {
        self.text
            .lines()
            .position(|l| {
                l.trim_start().strip_prefix(key).is_some_and(|r| after_key(r.trim_start()))
            })
            .map_or(0, |i| i + 1)
    }

    /// The 1-based line of byte `offset`.
    fn line_of_offset(&self, offset: usize) -> usize {
        let end = offset.min(self.text.len());
        self.text.as_bytes()[..end].iter().filter(|&&b| b == b'\n').count() + 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct T {
        name: String,
        #[serde(default)]
        sizes: Vec<u32>,
    }

    #[test]
    fn errors_name_the_file_the_line_and_the_key() {
        let f = TomlFile::new("t.toml", "name = \"x\"\n\nsizze = [1]\n");
        let e = f.parse::<T>().unwrap_err().to_string();
        assert!(e.starts_with("t.toml:3:") && e.contains("sizze"), "{e}");
        let f = TomlFile::new("t.toml", "name = \"x\"\nsizes = [\"big\"]\n");
        let e = f.parse::<T>().unwrap_err().to_string();
        assert!(e.starts_with("t.toml:2:"), "{e}");
        let f = TomlFile::new("t.toml", "# a plan\nname = \"x\"\n  sizes = [1, 2]\n");
        assert_eq!((f.line_of_key("name"), f.line_of_key("sizes"), f.line_of_key("x")), (2, 3, 0));
        assert_eq!((f.line_of_value("name", "x"), f.line_of_value("name", "y")), (2, 0));
        assert_eq!(f.invalid_at("sizes", "too many".into()).to_string(), "t.toml:3: too many");
        let e = read(Path::new("/nonexistent/t.toml")).unwrap_err().to_string();
        assert!(e.starts_with("/nonexistent/t.toml: "), "{e}");
    }
}
