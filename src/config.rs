//! The configuration file: job name prefix, targets and mirrors (CLI.md, "Configuration").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The start of every job name dispatch gives (pools, `dispatch submit` jobs, watermark
/// beacons, sessions) unless the config's `job_name_prefix` says otherwise.
pub const DEFAULT_JOB_NAME_PREFIX: &str = "dispatch-";

/// The prefix of the session jobs of sucoder, the tool dispatch's sessions replace: by default
/// a session also finds and adopts its live job under this name, so a session that tool
/// started is never doubled (`Config::adopt_job_name_prefixes`).
pub const LEGACY_JOB_NAME_PREFIX: &str = "sucoder-";

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Target {
    pub partition: String,
    pub account: String,
    pub qos: Option<String>,
    pub time: Option<String>,
    pub cpus_per_task: Option<u32>,
    pub mem: Option<String>,
    #[serde(default)]
    pub confined: bool,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Mirror {
    /// Where the mirror's repository lives, if dispatch needs to find it.
    pub path: Option<PathBuf>,
}

#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(from = "ConfigFile")]
pub struct Config {
    /// The start of every job name dispatch gives.
    pub job_name_prefix: String,
    /// Other prefixes a session's job may have been named under (by another tool, or by an
    /// earlier configuration): a session finds and adopts its live job under any of them, in
    /// the one name probe that looks for its own name. The config key of that name; when it
    /// is absent, [`LEGACY_JOB_NAME_PREFIX`] if `job_name_prefix` is not configured either,
    /// else none (a configured prefix works alone, as it always did).
    pub adopt_job_name_prefixes: Vec<String>,
    pub targets: BTreeMap<String, Target>,
    pub mirrors: BTreeMap<String, Mirror>,
    /// Where session batch scripts and Slurm logs go (see `session_files_dir`).
    pub session_files: Option<PathBuf>,
}

/// The file as written: which keys are there decides the defaults of the others.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    job_name_prefix: Option<String>,
    adopt_job_name_prefixes: Option<Vec<String>>,
    #[serde(default)]
    targets: BTreeMap<String, Target>,
    #[serde(default)]
    mirrors: BTreeMap<String, Mirror>,
    session_files: Option<PathBuf>,
}

impl From<ConfigFile> for Config {
    fn from(f: ConfigFile) -> Config {
        let adopt = f
            .adopt_job_name_prefixes
            .unwrap_or_else(|| match f.job_name_prefix {
                Some(_) => Vec::new(),
                None => vec![LEGACY_JOB_NAME_PREFIX.to_owned()],
            });
        Config {
            job_name_prefix: f
                .job_name_prefix
                .unwrap_or_else(|| DEFAULT_JOB_NAME_PREFIX.to_owned()),
            adopt_job_name_prefixes: adopt,
            targets: f.targets,
            mirrors: f.mirrors,
            session_files: f.session_files,
        }
    }
}

impl Default for Config {
    fn default() -> Self {
        Config::from(ConfigFile {
            job_name_prefix: None,
            adopt_job_name_prefixes: None,
            targets: BTreeMap::new(),
            mirrors: BTreeMap::new(),
            session_files: None,
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {}: {message}", path.display())]
    Malformed { path: PathBuf, message: String },
    #[error("config file {}: {at}mirrors {first:?} and {second:?} both have the token {token:?}; rename one", path.display())]
    TokenCollision {
        path: PathBuf,
        /// `line N: ` where the second mirror's table starts, when it can be found.
        at: String,
        first: String,
        second: String,
        token: String,
    },
    /// Two targets whose jobs Slurm shows alike (`Config::tied_targets`): after a lost record
    /// a launch on one could not tell its own job from the other's and would submit a second.
    #[error("config file {}: {at}targets {pair} cannot be told apart: {why}. A job of one \
             would be taken for the other's (a lost record would then give a second job). Pin a \
             distinct qos in both, or another partition or account", path.display())]
    TiedTargets {
        path: PathBuf,
        /// `line N: ` where the second target's table starts, when it can be found.
        at: String,
        /// `"a" and "b"`.
        pair: String,
        why: String,
    },
    #[error("no target {name:?} in {}; configured targets: {known}", path.display())]
    UnknownTarget {
        name: String,
        path: PathBuf,
        known: String,
    },
}

/// `--config`, else `$DISPATCH_CONFIG`, else `$XDG_CONFIG_HOME/dispatch/config.toml`, else
/// `~/.config/dispatch/config.toml`.
pub fn resolve(flag: Option<&Path>, env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = flag {
        return Some(p.to_owned());
    }
    let non_empty = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(p) = non_empty("DISPATCH_CONFIG") {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = crate::statedir::xdg_dir(env, "XDG_CONFIG_HOME") {
        return Some(p.join("dispatch/config.toml"));
    }
    non_empty("HOME").map(|h| PathBuf::from(h).join(".config/dispatch/config.toml"))
}

/// Where session batch scripts and Slurm logs live: the config's `session_files`, else
/// `$XDG_CACHE_HOME/dispatch/sessions`, else `~/.cache/dispatch/sessions`, else (no home at
/// all) `<state-dir>/sessions`. Not inside the state directory by default: a pending job whose
/// log directory has gone fails when it starts, and a session must survive the loss of its
/// local record (the next launch adopts its job by name).
pub fn session_files_dir(
    config: &Config,
    state_dir: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> PathBuf {
    if let Some(p) = &config.session_files {
        return p.clone();
    }
    let non_empty = |k: &str| env(k).filter(|v| !v.is_empty());
    if let Some(p) = crate::statedir::xdg_dir(env, "XDG_CACHE_HOME") {
        return p.join("dispatch/sessions");
    }
    match non_empty("HOME") {
        Some(h) => PathBuf::from(h).join(".cache/dispatch/sessions"),
        None => state_dir.join("sessions"),
    }
}

/// The first problem of target `name`: the key it is at (`None`: the table's header) and the
/// message, in the order the checks run.
fn target_fault(name: &str, t: &Target) -> Option<(Option<&'static str>, String)> {
    let table = format!("targets.{name}");
    if let Err(m) = crate::names::check_label("target", name) {
        return Some((None, m));
    }
    let pins = [
        ("partition", Some(&t.partition)),
        ("account", Some(&t.account)),
        ("qos", t.qos.as_ref()),
        ("time", t.time.as_ref()),
        ("mem", t.mem.as_ref()),
    ];
    for (key, value) in pins {
        if let Some(Err(m)) =
            value.map(|v| crate::names::check_no_control(&format!("{table}.{key}"), v))
        {
            return Some((Some(key), m));
        }
    }
    if let Some((key, value, why)) = slurm_value_fault(t) {
        let message = format!("{table}.{key} = {}: {why}", crate::names::short(value));
        return Some((Some(key), message));
    }
    for (key, value) in [("partition", &t.partition), ("account", &t.account)] {
        if value.is_empty() {
            return Some((Some(key), format!("{table}.{key} must not be empty")));
        }
    }
    if t.cpus_per_task == Some(0) {
        let message = format!("{table}.cpus_per_task must be at least 1");
        return Some((Some("cpus_per_task"), message));
    }
    None
}

/// The first of a target's values that Slurm would not take, in the order the checks ran:
/// partition, account and qos each one word (an empty one is refused by `validate` in words of
/// its own), then time and mem; with the key, the value and why.
fn slurm_value_fault(t: &Target) -> Option<(&'static str, &str, String)> {
    let words = [
        ("partition", Some(&t.partition)),
        ("account", Some(&t.account)),
        ("qos", t.qos.as_ref()),
    ];
    for (key, value) in words {
        if let Some(value) = value.filter(|v| !v.is_empty()) {
            if let Err(e) = crate::slurm::request::check_word(key, value) {
                return Some((key, value, e.to_string()));
            }
        }
    }
    if let Some(time) = &t.time {
        if let Err(e) = crate::slurm::SlurmDuration::parse_request(time) {
            return Some((
                "time",
                time,
                format!("{e}; give a Slurm time such as 90, 1:30:00, 1-00:00:00 or UNLIMITED"),
            ));
        }
    }
    if let Some(mem) = &t.mem {
        if let Err(e) = crate::slurm::MemoryMb::parse_request(mem) {
            return Some(("mem", mem, e.to_string()));
        }
    }
    None
}

/// The 1-based line of `key` in the table at `table` (empty: the top level), or of the table
/// itself when `key` is `None`, however the file writes them (headers, dotted keys, inline
/// tables): from the spans of the parser `toml` uses.
fn line_of(text: &str, table: &[&str], key: Option<&str>) -> Option<usize> {
    let doc = toml_edit::ImDocument::parse(text).ok()?;
    let mut at: &dyn toml_edit::TableLike = doc.as_table();
    let mut span = None;
    for part in table {
        let (k, item) = at.get_key_value(part)?;
        span = k.span();
        at = item.as_table_like()?;
    }
    if let Some(key) = key {
        span = at.get_key_value(key)?.0.span();
    }
    let start = span?.start;
    Some(text[..start].matches('\n').count() + 1)
}

/// Whether a job-name token (the name after the prefix) has the shape dispatch gives the jobs
/// that are not sessions: a pool's allocation (`pool-<pool>-<8 hex>`) and a `dispatch submit`
/// worker's job (`<worker>-<8 hex>`), the 8 lowercase hex digits from a random id. Sessions
/// leave such a job alone unless a configured or recorded mirror names it.
pub fn has_worker_job_shape(token: &str) -> bool {
    let Some((name, hex)) = token.rsplit_once('-') else {
        return false;
    };
    !name.is_empty()
        && hex.len() == 8
        && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A token is the mirror name with every character outside `[A-Za-z0-9._-]` replaced by `_`,
/// one per character (per Unicode scalar), nothing trimmed.
pub fn sanitize_token(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl Config {
    /// Load `path`; a missing file means defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Config::default()),
            Err(source) => {
                return Err(ConfigError::Read {
                    path: path.to_owned(),
                    source,
                })
            }
        };
        Config::parse(&text, path)
    }

    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Malformed {
            path: path.to_owned(),
            message: e.to_string().trim_end().replace('\n', " "),
        })?;
        config.validate(path, text)?;
        Ok(config)
    }

    /// Checks TOML cannot express; each error names the file, the line (when it can be found
    /// in `text`) and the key.
    fn validate(&self, path: &Path, text: &str) -> Result<(), ConfigError> {
        let at = |table: &[&str], key: Option<&str>| {
            line_of(text, table, key).map_or_else(String::new, |n| format!("line {n}: "))
        };
        let malformed = |at: String, message: String| ConfigError::Malformed {
            path: path.to_owned(),
            message: format!("{at}{message}"),
        };
        for (key, prefix) in std::iter::once(("job_name_prefix", &self.job_name_prefix)).chain(
            self.adopt_job_name_prefixes
                .iter()
                .map(|p| ("adopt_job_name_prefixes", p)),
        ) {
            if sanitize_token(prefix) != *prefix {
                return Err(malformed(
                    at(&[], Some(key)),
                    format!("{key} {prefix:?} may only hold [A-Za-z0-9._-]"),
                ));
            }
        }
        let no_control = |table: &[&str], key: &str, value: &str| {
            let what = [table, &[key]].concat().join(".");
            crate::names::check_no_control(&what, value)
                .map_err(|m| malformed(at(table, Some(key)), m))
        };
        if let Some(dir) = &self.session_files {
            no_control(&[], "session_files", &dir.to_string_lossy())?;
        }
        for (name, t) in &self.targets {
            if let Some((key, message)) = target_fault(name, t) {
                return Err(malformed(at(&["targets", name], key), message));
            }
        }
        if let Some((first, second, why)) = self.tied_targets() {
            return Err(ConfigError::TiedTargets {
                path: path.to_owned(),
                at: at(&["targets", second], None),
                pair: format!("{first:?} and {second:?}"),
                why,
            });
        }
        let mut seen: BTreeMap<String, &str> = BTreeMap::new();
        for (name, mirror) in &self.mirrors {
            let table = ["mirrors", name.as_str()];
            crate::names::check_label("mirror", name)
                .map_err(|m| malformed(at(&table, None), m))?;
            if let Some(path) = &mirror.path {
                no_control(&table, "path", &path.to_string_lossy())?;
            }
            let token = sanitize_token(name);
            if let Some(first) = seen.insert(token.clone(), name) {
                return Err(ConfigError::TokenCollision {
                    path: path.to_owned(),
                    at: at(&table, None),
                    first: first.to_owned(),
                    second: name.clone(),
                    token,
                });
            }
        }
        Ok(())
    }

    /// The first pair of targets (in name order) whose jobs Slurm shows alike, with why.
    ///
    /// The rule: same partition (compared exactly, as Slurm does), same account (without
    /// case: Slurm stores it in lower case), and a QOS that may be the same: equal pins
    /// (without case), or no QOS pinned on either side. A job submitted without `--qos` gets
    /// its association's default QOS, which this file cannot know and an administrator can
    /// change at any time, so a missing pin may equal any QOS. Sessions find their job by
    /// name and tell targets apart by partition, account and QOS (`policy::session::
    /// match_target`); two such targets would claim each other's jobs or neither.
    pub fn tied_targets(&self) -> Option<(&str, &str, String)> {
        let targets: Vec<(&String, &Target)> = self.targets.iter().collect();
        for (i, (a_name, a)) in targets.iter().enumerate() {
            for (b_name, b) in &targets[i + 1..] {
                if a.partition != b.partition || !a.account.eq_ignore_ascii_case(&b.account) {
                    continue;
                }
                let qos = match (&a.qos, &b.qos) {
                    (Some(x), Some(y)) if x.eq_ignore_ascii_case(y) => {
                        format!("both pin qos {x:?}")
                    }
                    (Some(_), Some(_)) => continue,
                    (None, None) => "neither pins a qos".to_owned(),
                    (None, Some(q)) | (Some(q), None) => {
                        let bare = if a.qos.is_none() { a_name } else { b_name };
                        format!(
                            "{bare:?} pins no qos, so its jobs get the account's default QOS, \
                             which may be {q:?}"
                        )
                    }
                };
                return Some((
                    a_name.as_str(),
                    b_name.as_str(),
                    format!(
                        "both pin partition {:?} and account {:?}, and {qos}",
                        a.partition, a.account
                    ),
                ));
            }
        }
        None
    }

    pub fn target(&self, name: &str, path: &Path) -> Result<&Target, ConfigError> {
        self.targets
            .get(name)
            .ok_or_else(|| ConfigError::UnknownTarget {
                name: name.to_owned(),
                path: path.to_owned(),
                known: if self.targets.is_empty() {
                    "none".to_owned()
                } else {
                    self.targets.keys().cloned().collect::<Vec<_>>().join(", ")
                },
            })
    }

    /// The Slurm job name of a mirror's session.
    pub fn job_name(&self, mirror: &str) -> String {
        format!("{}{}", self.job_name_prefix, sanitize_token(mirror))
    }

    /// Every prefix a session's job may be named under: `job_name_prefix` (the name a new job
    /// gets), then each of `adopt_job_name_prefixes` that differs from it.
    pub fn session_prefixes(&self) -> Vec<&str> {
        let mut all = vec![self.job_name_prefix.as_str()];
        for p in &self.adopt_job_name_prefixes {
            if !all.contains(&p.as_str()) {
                all.push(p);
            }
        }
        all
    }

    /// Every name a mirror's session job may have, its own first ([`Self::session_prefixes`]).
    pub fn session_job_names(&self, mirror: &str) -> Vec<String> {
        let token = sanitize_token(mirror);
        self.session_prefixes()
            .into_iter()
            .map(|p| format!("{p}{token}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_tokens_without_the_worker_job_shape() {
        assert!(has_worker_job_shape("pool-ap-00c77252"));
        for token in [
            "dispatch",
            "exp-2026",
            "x-0000000g",
            "x-00C77252",
            "-00c77252",
            "a-00c772521",
        ] {
            assert!(!has_worker_job_shape(token), "{token}");
        }
    }

    #[test]
    fn sanitize_examples_from_the_notes() {
        for (name, token) in [
            ("SuCoder", "SuCoder"),
            ("K-Aggregators", "K-Aggregators"),
            ("K Agg", "K_Agg"),
            ("K/Agg", "K_Agg"),
            ("a  b", "a__b"),
            ("café", "caf_"),
            ("my--odd.v1", "my--odd.v1"),
            ("x;rm -rf /", "x_rm_-rf__"),
            ("$(id)\n", "__id__"),
        ] {
            assert_eq!(sanitize_token(name), token, "{name:?}");
        }
    }

    #[test]
    fn parses_the_cli_md_example() {
        let text = r#"
job_name_prefix = "sucoder-"

[targets.savio-htc]
partition = "savio4_htc"
account = "co_carleton"
qos = "carleton_htc4_normal"
time = "02:00:00"
cpus_per_task = 4
mem = "16G"
confined = true
"#;
        let c = Config::parse(text, Path::new("c.toml")).unwrap();
        let t = &c.targets["savio-htc"];
        assert_eq!(t.partition, "savio4_htc");
        assert_eq!(t.qos.as_deref(), Some("carleton_htc4_normal"));
        assert!(t.confined);
        assert_eq!(c.job_name("K Agg"), "sucoder-K_Agg");
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = Config::parse(
            "[targets.a]\npartition = \"p\"\naccount = 5\n",
            Path::new("/x/c.toml"),
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(
            msg.contains("/x/c.toml") && msg.contains("line 3") && msg.contains("account"),
            "{msg}"
        );
        let e = err("[targets.a]\npartition = \"p\"\naccount = \"a\"\nqueue = \"x\"\n");
        assert!(e.contains("queue"), "{e}");
    }

    #[test]
    fn token_collisions_are_refused() {
        let e = Config::parse(
            "[mirrors.\"K Agg\"]\n[mirrors.\"K/Agg\"]\n",
            Path::new("c.toml"),
        )
        .unwrap_err();
        assert!(
            matches!(e, ConfigError::TokenCollision { ref token, .. } if token == "K_Agg"),
            "{e}"
        );
    }

    /// Issue 10 item 10: targets Slurm cannot tell apart (same partition and account, and the
    /// same QOS or no QOS on either side) are refused at load, naming both.
    #[test]
    fn targets_slurm_cannot_tell_apart_are_refused_naming_both() {
        let t = |name: &str, p: &str, a: &str, q: Option<&str>| {
            let qos = q.map_or(String::new(), |q| format!("qos = \"{q}\"\n"));
            format!("[targets.{name}]\npartition = \"{p}\"\naccount = \"{a}\"\n{qos}")
        };
        let tied = |a: String, b: String| {
            let e = Config::parse(&(a + &b), Path::new("c.toml")).unwrap_err();
            assert!(matches!(e, ConfigError::TiedTargets { .. }), "{e}");
            e.to_string()
        };
        // Identical pins, no QOS.
        let e = tied(t("a", "debug", "dev", None), t("b", "debug", "dev", None));
        assert!(e.contains("targets \"a\" and \"b\""), "{e}");
        assert!(e.contains("c.toml"), "{e}");
        // No QOS against the (default) QOS, and against any other: a job submitted without
        // --qos gets the association's default, which the config cannot know.
        let e = tied(
            t("a", "debug", "dev", None),
            t("b", "debug", "dev", Some("normal")),
        );
        assert!(e.contains("\"a\" pins no qos"), "{e}");
        tied(
            t("a", "debug", "dev", Some("high")),
            t("b", "debug", "dev", None),
        );
        // Account and QOS compare without case, as Slurm stores them.
        tied(
            t("a", "debug", "DEV", Some("Normal")),
            t("b", "debug", "dev", Some("normal")),
        );
        // Told apart: another partition (exact), another account, two distinct QOS pins.
        for (a, b) in [
            (t("a", "debug", "dev", None), t("b", "Debug", "dev", None)),
            (t("a", "debug", "dev", None), t("b", "debug", "other", None)),
            (
                t("a", "debug", "dev", Some("normal")),
                t("b", "debug", "dev", Some("high")),
            ),
        ] {
            Config::parse(&(a + &b), Path::new("c.toml")).unwrap();
        }
    }

    #[test]
    fn missing_file_means_defaults() {
        let c = Config::load(Path::new("/nonexistent/dispatch.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.job_name_prefix, "dispatch-");
        assert_eq!(c.adopt_job_name_prefixes, ["sucoder-"]);
    }

    /// dispatch names its jobs `dispatch-…`; a session also finds its job under sucoder's
    /// name, unless a prefix is configured (which then works alone, as it always did) or the
    /// prefixes to adopt under are.
    #[test]
    fn own_names_by_default_and_sucoders_adopted() {
        let parse = |text: &str| Config::parse(text, Path::new("c.toml")).unwrap();
        let c = parse("");
        assert_eq!(c.job_name("K Agg"), "dispatch-K_Agg");
        assert_eq!(
            c.session_job_names("K Agg"),
            ["dispatch-K_Agg", "sucoder-K_Agg"]
        );
        let c = parse("job_name_prefix = \"sucoder-\"\n");
        assert_eq!(c.session_job_names("m"), ["sucoder-m"]);
        let c = parse("job_name_prefix = \"x-\"\n");
        assert_eq!(c.session_job_names("m"), ["x-m"]);
        let c = parse(
            "job_name_prefix = \"x-\"\nadopt_job_name_prefixes = [\"sucoder-\", \"x-\", \"y.\"]\n",
        );
        assert_eq!(c.session_job_names("m"), ["x-m", "sucoder-m", "y.m"]);
        let c = parse("adopt_job_name_prefixes = []\n");
        assert_eq!(c.session_job_names("m"), ["dispatch-m"]);
        let e = err("adopt_job_name_prefixes = [\"ok-\", \"not ok\"]\n");
        assert!(
            e.contains("c.toml: line 1: adopt_job_name_prefixes \"not ok\""),
            "{e}"
        );
    }

    #[test]
    fn session_files_stay_out_of_the_state_directory_unless_there_is_no_home() {
        let env = crate::statedir::fixed_env;
        let state = Path::new("/s");
        let mut c = Config::default();
        let both = env(&[("XDG_CACHE_HOME", "/x"), ("HOME", "/h")]);
        assert_eq!(
            session_files_dir(&c, state, &both),
            Path::new("/x/dispatch/sessions")
        );
        // Empty and relative XDG directories are ignored (the XDG spec calls them invalid).
        let home = Path::new("/h/.cache/dispatch/sessions");
        let empty = env(&[("XDG_CACHE_HOME", ""), ("HOME", "/h")]);
        assert_eq!(session_files_dir(&c, state, &empty), home);
        let relative = env(&[("XDG_CACHE_HOME", "rel/cache"), ("HOME", "/h")]);
        assert_eq!(session_files_dir(&c, state, &relative), home);
        assert_eq!(
            session_files_dir(&c, state, &env(&[])),
            Path::new("/s/sessions")
        );
        c = Config::parse(
            "session_files = \"/nfs/me/dispatch\"\n",
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(
            session_files_dir(&c, state, &both),
            Path::new("/nfs/me/dispatch")
        );
    }

    /// The message of a config that fails to load.
    fn err(text: &str) -> String {
        Config::parse(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn checks_beyond_toml_name_the_line_and_the_key() {
        let e = err("\njob_name_prefix = \"bad prefix\"\n");
        assert!(e.contains("c.toml: line 2: job_name_prefix"), "{e}");
        let e = err("[targets.a]\npartition = \"p\"\naccount = \"\"\n");
        assert!(
            e.contains("line 3: targets.a.account must not be empty"),
            "{e}"
        );
        let e = err("[targets.\"my t\"]\npartition = \"p\"\naccount = \"a\"\ncpus_per_task = 0\n");
        assert!(
            e.contains("line 4: targets.my t.cpus_per_task must be at least 1"),
            "{e}"
        );
        let e = err("[mirrors.\"K Agg\"]\n\n[mirrors.\"K/Agg\"]\n");
        assert!(e.contains("c.toml: line 3: mirrors"), "{e}");
    }

    #[test]
    fn control_characters_and_option_like_names_are_refused_at_load() {
        let e = err("[targets.\"t\\ntouch PWNED\"]\npartition = \"p\"\naccount = \"a\"\n");
        assert!(
            e.contains("target name \"t\\ntouch PWNED\" contains a control"),
            "{e}"
        );
        let e = err("[targets.\"-t\"]\npartition = \"p\"\naccount = \"a\"\n");
        assert!(
            e.contains("line 1: target name \"-t\" starts with '-'"),
            "{e}"
        );
        let e = err("[targets.t]\npartition = \"p\\tq\"\naccount = \"a\"\n");
        assert!(e.contains("line 2: targets.t.partition"), "{e}");
        let e = err("[mirrors.m]\npath = \"/src/m\\n$(touch PWNED)\"\n");
        assert!(e.contains("line 2: mirrors.m.path"), "{e}");
        let e = err("[mirrors.\"m\\u001b[31m\"]\n");
        assert!(e.contains("mirror name"), "{e}");
        let e = err("session_files = \"/c\\r\"\n");
        assert!(e.contains("line 1: session_files"), "{e}");
        // Shell metacharacters without control characters are legitimate names: they are only
        // ever quoted or sanitized.
        let ok = "[targets.\"t$(id)`x`;'\"]\npartition = \"p\"\naccount = \"a\"\n\
                  [mirrors.\"m $(id)\"]\npath = \"/src/$(id) 'q'\"\n";
        Config::parse(ok, Path::new("c.toml")).unwrap();
    }

    #[test]
    fn time_and_mem_are_checked_at_load_with_their_line() {
        let e = err("[targets.t]\npartition = \"p\"\naccount = \"a\"\ntime = \"2 hours\"\n");
        assert!(
            e.contains("c.toml: line 4: targets.t.time = \"2 hours\""),
            "{e}"
        );
        let e = err("[targets.t]\npartition = \"p\"\naccount = \"a\"\nmem = \"lots\"\n");
        assert!(e.contains("line 4: targets.t.mem = \"lots\""), "{e}");
        let ok = "[targets.t]\npartition = \"p\"\naccount = \"a\"\ntime = \"UNLIMITED\"\n\
                  mem = \"16G\"\n";
        Config::parse(ok, Path::new("c.toml")).unwrap();
        // However the file writes the key: an inline table, a dotted key.
        let e =
            err("[targets]\n\nt = { partition = \"p\", account = \"a\", time = \"2 hours\" }\n");
        assert!(e.contains("line 3: targets.t.time"), "{e}");
        let e = err("[targets]\nt.partition = \"p\"\nt.account = \"a\"\nt.mem = \"lots\"\n");
        assert!(e.contains("line 4: targets.t.mem"), "{e}");
    }

    /// Issue 36 item 6: the config's `mem` takes what sbatch takes (`4GB`), and a refusal names
    /// the forms that work.
    #[test]
    fn mem_takes_what_sbatch_takes_and_names_the_forms() {
        let ok = "[targets.t]\npartition = \"p\"\naccount = \"a\"\nmem = \"4GB\"\n";
        Config::parse(ok, Path::new("c.toml")).unwrap();
        let e = err("[targets.t]\npartition = \"p\"\naccount = \"a\"\nmem = \"4.5G\"\n");
        assert!(e.contains("512M, 512MB, 4G, 4GB"), "{e}");
    }

    /// Issue 21 item 10: a partition, account or qos that is not one Slurm word fails at load
    /// with the file, its line and its real key (it named `targets.t.(placement)` at launch).
    #[test]
    fn placement_words_are_checked_at_load_with_their_line() {
        let e = err("[targets.t]\npartition = \"debug; touch x\"\naccount = \"a\"\n");
        assert!(
            e.contains("c.toml: line 2: targets.t.partition = \"debug; touch x\"")
                && e.contains("one word"),
            "{e}"
        );
        let e = err("[targets.t]\npartition = \"p\"\naccount = \"a,b\"\n");
        assert!(e.contains("line 3: targets.t.account = \"a,b\""), "{e}");
        let e = err("[targets.t]\npartition = \"p\"\naccount = \"a\"\nqos = \"n n\"\n");
        assert!(e.contains("line 4: targets.t.qos = \"n n\""), "{e}");
    }
}
