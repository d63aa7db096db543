//! Configuration errors, each located as `FILE:LINE:COL: message`.

/// Most problems reported for one file; the rest are summarized in one line.
pub const MAX_REPORTED_ERRORS: usize = 50;

/// All problems found in one configuration file; Display prints one `FILE:LINE:COL: message`
/// per line.
#[derive(Debug, thiserror::Error)]
#[error("{}", .errors.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct ConfigError {
    /// The problems, one `FILE:LINE:COL: message` each.
    pub errors: Vec<LocatedError>,
}

/// One located problem: `FILE:LINE:COL: message`, or `FILE: message` when there is no
/// position (the file cannot be read at all) rather than a made-up `:0:0`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{file}{}: {message}", if *.line == 0 { String::new() } else { format!(":{line}:{column}") })]
pub struct LocatedError {
    /// The file, as the caller named it.
    pub file: String,
    /// 1-based; 0 when only the key path is known (then `message` names the path).
    pub line: usize,
    /// 1-based; 0 when `line` is 0.
    pub column: usize,
    /// What is wrong.
    pub message: String,
}

impl LocatedError {
    pub(super) fn new(
        file: &str,
        line: usize,
        column: usize,
        message: impl Into<String>,
    ) -> LocatedError {
        LocatedError {
            file: file.to_owned(),
            line,
            column,
            message: message.into(),
        }
    }
}

impl ConfigError {
    /// An error with one problem, at `line`:`column` of `file` (0, 0: no position).
    pub fn single(
        file: &str,
        line: usize,
        column: usize,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError {
            errors: vec![LocatedError::new(file, line, column, message)],
        }
    }

    /// Sort by position (unlocated last) and cap the list at [`MAX_REPORTED_ERRORS`].
    /// `unlisted` counts further problems the caller found but did not keep.
    pub(super) fn from_problems(
        file: &str,
        mut errors: Vec<LocatedError>,
        unlisted: usize,
    ) -> ConfigError {
        errors.sort_by_key(|e| (e.line == 0, e.line, e.column));
        if errors.len() > MAX_REPORTED_ERRORS {
            let hidden = errors.len() - MAX_REPORTED_ERRORS + unlisted;
            let first_hidden = &errors[MAX_REPORTED_ERRORS];
            let (line, column) = (first_hidden.line, first_hidden.column);
            errors.truncate(MAX_REPORTED_ERRORS);
            errors.push(LocatedError::new(
                file,
                line,
                column,
                format!("{hidden} more problems not shown; fix the ones above first"),
            ));
        }
        ConfigError { errors }
    }
}

/// A value that breaks a rule of the configuration; the message says which rule and shows the
/// value, as `check-config` prints it after the key's location.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct InvalidValue(pub(super) String);
