//! The arguments of a `harness = false` test target (tests/real_cluster.rs), read the way
//! libtest reads them, so that `cargo test --test real_cluster -- ARGS` means what it means
//! for every other target. A flag it does not know is an error, never a silent "run nothing".

/// What to run.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HarnessArgs {
    /// Run the tests whose name contains one of these (all when empty).
    pub filters: Vec<String>,
    /// Skip the tests whose name contains one of these.
    pub skips: Vec<String>,
    /// Filters match whole names.
    pub exact: bool,
    /// List the tests instead of running them.
    pub list: bool,
    /// `--ignored`: only ignored tests, of which this target has none.
    pub only_ignored: bool,
}

impl HarnessArgs {
    /// Read `args` (without the program name). Flags that change nothing here (output
    /// formatting, `--test-threads`: scenarios share one test bed and run one after another)
    /// are accepted; any other flag is an error.
    pub fn parse(args: impl IntoIterator<Item = String>) -> Result<HarnessArgs, String> {
        let mut out = HarnessArgs::default();
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            let (flag, inline) = match arg.split_once('=') {
                Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
                _ => (arg.clone(), None),
            };
            let mut value = |what: &str| {
                inline
                    .clone()
                    .or_else(|| args.next())
                    .ok_or_else(|| format!("{what} needs a value"))
            };
            match flag.as_str() {
                "--skip" => out.skips.push(value("--skip")?),
                "--exact" => out.exact = true,
                "--list" => out.list = true,
                "--ignored" => out.only_ignored = true,
                "--include-ignored" | "--nocapture" | "--no-capture" | "--show-output" | "-q"
                | "--quiet" | "--bench" => {}
                "--test-threads" | "--format" | "--color" => {
                    value(&flag)?;
                }
                f if f.starts_with('-') => {
                    return Err(format!(
                        "unknown flag {arg:?}: this target accepts filters and --skip, --exact, \
                         --list, --ignored, --include-ignored, --test-threads, --nocapture, \
                         --quiet, --format, --color"
                    ));
                }
                _ => out.filters.push(arg),
            }
        }
        Ok(out)
    }

    /// Whether the test `name` is chosen.
    pub fn chooses(&self, name: &str) -> bool {
        let matches = |pattern: &String| {
            if self.exact {
                name == pattern
            } else {
                name.contains(pattern.as_str())
            }
        };
        !self.only_ignored
            && (self.filters.is_empty() || self.filters.iter().any(matches))
            && !self.skips.iter().any(matches)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<HarnessArgs, String> {
        HarnessArgs::parse(args.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn skip_exact_and_filters_choose_as_libtest_does() {
        let a = parse(&["--skip", "gates", "webhooks"]).expect("valid");
        assert!(a.chooses("webhooks::x"));
        assert!(!a.chooses("gates::x"));
        assert!(!a.chooses("trust::y"), "a filter is given");
        let a = parse(&["--skip=gates"]).expect("valid");
        assert!(a.chooses("trust::y"));
        assert!(!a.chooses("gates::x"));
        let a = parse(&["--exact", "gates::x"]).expect("valid");
        assert!(a.chooses("gates::x"));
        assert!(!a.chooses("gates::xy"));
        let a = parse(&["--test-threads", "8", "--nocapture"]).expect("valid");
        assert!(
            a.chooses("anything"),
            "--test-threads takes its value along"
        );
        let a = parse(&["--test-threads=8"]).expect("valid");
        assert!(a.filters.is_empty());
        assert!(parse(&["--list"]).expect("valid").list);
        assert!(!parse(&["--ignored"]).expect("valid").chooses("a"));
    }

    #[test]
    fn unknown_flags_and_missing_values_are_errors() {
        assert!(parse(&["--shuffle"]).is_err());
        assert!(parse(&["--skip"]).is_err());
        assert!(parse(&["--test-threads"]).is_err());
    }
}
