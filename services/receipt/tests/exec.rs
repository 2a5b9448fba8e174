//! Contained check execution (RECEIPT-26..30, GAP-01/03/06), in both modes.
//!
//! Every long-running command carries a unique marker argument (`sleep
//! 30.<random>`), and every test ends by asserting that no live process with
//! that marker remains anywhere on the host (scanning /proc is fine in tests).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use slm_receipt::exec::{
    CheckSpec, Containment, ContainmentChoice, Execution, available_containment, run_contained,
};

const SURVIVOR: &str = "a process started by the check is still running: ";
const DID_NOT_COMPLETE: &str = "Independent check did not complete";
const TIMED_OUT: &str = "Independent check timed out";

/// A unique number usable as `sleep`'s argument: `<secs>.<12 random digits>`.
fn marker(secs: u32) -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as u64;
    let mix = (u64::from(std::process::id()) * 1_000_003
        + N.fetch_add(1, Ordering::Relaxed) * 7_919
        + nanos)
        % 1_000_000_000_000;
    format!("{secs}.{mix:012}")
}

fn std_env() -> Vec<(String, String)> {
    vec![("PATH".into(), "/usr/bin:/bin".into())]
}

struct Run {
    dir: tempfile::TempDir,
    spec: CheckSpec,
}

fn check(mode: ContainmentChoice, argv: &[&str]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let spec = CheckSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: dir.path().to_path_buf(),
        env: std_env(),
        timeout: Duration::from_secs(30),
        containment: mode,
        sandbox: Default::default(),
    };
    Run { dir, spec }
}

fn sh(mode: ContainmentChoice, script: &str) -> Run {
    check(mode, &["sh", "-c", script])
}

async fn go(run: Run) -> Execution {
    let Run { dir, spec } = run;
    let mode = spec.containment;
    let exec = run_contained(spec).await;
    drop(dir);
    let expected = match mode {
        ContainmentChoice::CgroupV2 => Containment::CgroupV2,
        ContainmentChoice::Subreaper => Containment::Subreaper,
        ContainmentChoice::Auto => available_containment(),
    };
    assert_eq!(exec.containment, expected, "{exec:?}");
    exec
}

/// `(state, ppid)` from /proc/<pid>/stat.
fn state_of(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 2..];
    let mut f = rest.split_whitespace();
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Live (non-zombie) processes whose command line holds `marker`.
fn live_with_marker(marker: &str) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let hit = cmdline
            .split(|&b| b == 0)
            .any(|arg| arg == marker.as_bytes());
        if hit && state_of(pid).is_some_and(|(s, _)| s != 'Z' && s != 'X') {
            out.push(pid);
        }
    }
    out
}

fn assert_no_marker(marker: &str) {
    let left = live_with_marker(marker);
    assert!(
        left.is_empty(),
        "processes with marker {marker} survived: {left:?}"
    );
}

/// The pid must be gone: absent, or a zombie that is not ours to reap.
fn assert_gone(pid: i32) {
    match state_of(pid) {
        None => {}
        Some((s, ppid)) => {
            assert!(
                (s == 'Z' || s == 'X') && ppid != std::process::id() as i32,
                "survivor {pid} still present: state {s}, ppid {ppid}"
            );
        }
    }
}

/// Checks the survivor reason and returns the named pid.
fn survivor_pid(exec: &Execution) -> i32 {
    let reason = exec
        .stop_reason
        .as_deref()
        .unwrap_or_else(|| panic!("no reason: {exec:?}"));
    let rest = reason
        .strip_prefix(SURVIVOR)
        .unwrap_or_else(|| panic!("not a survivor reason: {reason:?}"));
    let (name, pid) = rest.rsplit_once(" (").expect("name (pid)");
    assert!(!name.is_empty(), "{reason:?}");
    pid.strip_suffix(')').unwrap().parse().expect("pid")
}

// ---------------------------------------------------------------- the cases

async fn true_passes(mode: ContainmentChoice) {
    let e = go(check(mode, &["/bin/true"])).await;
    assert_eq!(e.exit_code, 0, "{e:?}");
    assert_eq!(e.stop_reason, None);
    assert!(e.stdout.is_empty() && e.stderr.is_empty());
}

async fn exit_code_kept(mode: ContainmentChoice) {
    let e = go(sh(mode, "exit 3")).await;
    assert_eq!(e.exit_code, 3, "{e:?}");
    assert_eq!(e.stop_reason, None);
}

async fn signal_is_negative(mode: ContainmentChoice) {
    let e = go(sh(mode, "kill -TERM $$")).await;
    assert_eq!(e.exit_code, -15, "{e:?}");
    assert_eq!(e.stop_reason, None);
}

async fn output_captured(mode: ContainmentChoice) {
    let e = go(sh(mode, r"printf 'ok\n'; printf 'err' >&2")).await;
    assert_eq!(e.exit_code, 0, "{e:?}");
    assert_eq!(e.stdout, b"ok\n");
    assert_eq!(e.stderr, b"err");
}

async fn large_output_drained(mode: ContainmentChoice) {
    // 4 MiB on stdout while stderr also gets data: both drained concurrently.
    let e = go(sh(
        mode,
        "head -c 4194304 /dev/zero; head -c 100000 /dev/zero >&2; printf end",
    ))
    .await;
    assert_eq!(e.exit_code, 0, "{:?}", e.stop_reason);
    assert_eq!(e.stdout.len(), 4_194_304 + 3);
    assert!(e.stdout.ends_with(b"end"));
    assert_eq!(e.stderr.len(), 100_000);
}

async fn env_is_exact(mode: ContainmentChoice) {
    let mut run = check(mode, &["/usr/bin/env"]);
    run.spec.env = vec![
        ("ALPHA".into(), "1".into()),
        ("BETA".into(), "two words".into()),
    ];
    let e = go(run).await;
    assert_eq!(e.exit_code, 0, "{e:?}");
    assert_eq!(
        String::from_utf8_lossy(&e.stdout),
        "ALPHA=1\nBETA=two words\n"
    );
}

async fn cwd_honoured(mode: ContainmentChoice) {
    let run = check(mode, &["/bin/pwd"]);
    let want = std::fs::canonicalize(run.dir.path()).unwrap();
    let e = go(run).await;
    assert_eq!(e.exit_code, 0, "{e:?}");
    assert_eq!(
        String::from_utf8_lossy(&e.stdout).trim_end(),
        want.to_str().unwrap()
    );
}

async fn bare_name_uses_given_path(mode: ContainmentChoice) {
    // A tool only reachable through the PATH given to the check.
    let bin = tempfile::tempdir().unwrap();
    let tool = bin.path().join("slm-given-path-tool");
    std::os::unix::fs::symlink(Path::new("/bin/echo"), &tool).unwrap();
    let mut run = check(mode, &["slm-given-path-tool", "found"]);
    run.spec.env = vec![(
        "PATH".into(),
        format!("/nonexistent:{}", bin.path().display()),
    )];
    let e = go(run).await;
    assert_eq!(e.exit_code, 0, "{e:?}");
    assert_eq!(e.stdout, b"found\n");

    // `sh` through a normal PATH.
    let e = go(check(mode, &["sh", "-c", "printf via-path"])).await;
    assert_eq!(e.exit_code, 0, "{e:?}");
    assert_eq!(e.stdout, b"via-path");
}

async fn bare_name_missing(mode: ContainmentChoice) {
    let mut run = check(mode, &["sh", "-c", "exit 0"]);
    run.spec.env = vec![("PATH".into(), "/nonexistent".into())];
    let e = go(run).await;
    assert_eq!(e.exit_code, -1);
    assert_eq!(e.stop_reason.as_deref(), Some(DID_NOT_COMPLETE));

    let e = go(check(mode, &["/nonexistent/slm-check-binary"])).await;
    assert_eq!(e.exit_code, -1);
    assert_eq!(e.stop_reason.as_deref(), Some(DID_NOT_COMPLETE));

    let e = go(check(mode, &[])).await;
    assert_eq!(e.exit_code, -1);
    assert_eq!(e.stop_reason.as_deref(), Some(DID_NOT_COMPLETE));
}

async fn timeout_kills_everything(mode: ContainmentChoice) {
    let m = marker(10);
    let mut run = check(mode, &["sleep", &m]);
    run.spec.timeout = Duration::from_millis(300);
    let t0 = Instant::now();
    let e = go(run).await;
    let took = t0.elapsed();
    assert_eq!(e.exit_code, -1, "{e:?}");
    assert_eq!(e.stop_reason.as_deref(), Some(TIMED_OUT));
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_no_marker(&m);
}

async fn timeout_kills_detached_children(mode: ContainmentChoice) {
    let m = marker(30);
    let mut run = sh(mode, &format!("setsid sleep {m} & sleep {m}"));
    run.spec.timeout = Duration::from_millis(500);
    let e = go(run).await;
    assert_eq!(e.exit_code, -1, "{e:?}");
    assert_eq!(e.stop_reason.as_deref(), Some(TIMED_OUT));
    assert_no_marker(&m);
}

async fn background_sleep_survivor(mode: ContainmentChoice) {
    let m = marker(30);
    let e = go(sh(mode, &format!("sleep {m} & exit 0"))).await;
    assert_eq!(e.exit_code, -1, "{e:?}");
    let pid = survivor_pid(&e);
    let reason = e.stop_reason.as_deref().unwrap();
    // The forked child may not have exec'ed `sleep` yet when the shell exits.
    assert!(
        reason.ends_with(&format!("sleep ({pid})")) || reason.ends_with(&format!("sh ({pid})")),
        "{reason:?}"
    );
    assert_gone(pid);
    assert_no_marker(&m);
}

async fn setsid_scrubbed_double_fork(mode: ContainmentChoice) {
    let m = marker(30);
    let e = go(sh(
        mode,
        &format!(r#"setsid sh -c "exec env -i sleep {m}" & sleep 0.2; exit 0"#),
    ))
    .await;
    assert_eq!(e.exit_code, -1, "{e:?}");
    assert_gone(survivor_pid(&e));
    assert_no_marker(&m);
}

async fn classic_double_fork(mode: ContainmentChoice) {
    // The intermediate subshell exits at once: the grandchild is orphaned.
    let m = marker(30);
    let e = go(sh(mode, &format!("(setsid env -i sleep {m} &); exit 0"))).await;
    assert_eq!(e.exit_code, -1, "{e:?}");
    assert_gone(survivor_pid(&e));
    assert_no_marker(&m);
}

async fn closed_stdio_survivor(mode: ContainmentChoice) {
    let m = marker(30);
    let e = go(sh(mode, &format!("exec >&- 2>&-; sleep {m} & exit 0"))).await;
    assert_eq!(e.exit_code, -1, "{e:?}");
    assert_gone(survivor_pid(&e));
    assert_no_marker(&m);
}

async fn nonzero_exit_with_survivor(mode: ContainmentChoice) {
    let m = marker(30);
    let e = go(sh(mode, &format!("sleep {m} & exit 1"))).await;
    assert_eq!(e.exit_code, 1, "{e:?}");
    assert_gone(survivor_pid(&e));
    assert_no_marker(&m);
}

async fn survivor_holding_stdout(mode: ContainmentChoice) {
    // The survivor keeps the pipes open: output is still returned, promptly.
    let m = marker(30);
    let t0 = Instant::now();
    let e = go(sh(
        mode,
        &format!("printf out; printf err >&2; sleep {m} & exit 0"),
    ))
    .await;
    assert!(t0.elapsed() < Duration::from_secs(20));
    assert_eq!(e.exit_code, -1, "{e:?}");
    assert_eq!(e.stdout, b"out");
    assert_eq!(e.stderr, b"err");
    assert_gone(survivor_pid(&e));
    assert_no_marker(&m);
}

async fn many_survivors_all_killed(mode: ContainmentChoice) {
    let m = marker(30);
    let script = format!(
        r#"for i in 1 2 3; do sh -c "sleep {m} & setsid sleep {m} & (sleep {m} &); wait" & done; sleep 0.3; exit 0"#
    );
    let e = go(sh(mode, &script)).await;
    assert_eq!(e.exit_code, -1, "{e:?}");
    assert_gone(survivor_pid(&e));
    assert_no_marker(&m);
}

async fn waited_background_passes(mode: ContainmentChoice) {
    let e = go(sh(mode, "true & wait; exit 0")).await;
    assert_eq!(e.exit_code, 0, "{e:?}");
    assert_eq!(e.stop_reason, None);
}

async fn finished_children_pass(mode: ContainmentChoice) {
    // Children that have exited (even unreaped ones) are not survivors.
    let e = go(sh(
        mode,
        "sh -c 'true & true & wait'; (true &); sleep 0.5; exit 0",
    ))
    .await;
    assert_eq!(e.exit_code, 0, "{e:?}");
    assert_eq!(e.stop_reason, None);
}

macro_rules! both_modes {
    ($($name:ident),* $(,)?) => {
        mod cgroup {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::ContainmentChoice::CgroupV2).await;
                }
            )*
        }
        mod subreaper {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::ContainmentChoice::Subreaper).await;
                }
            )*
        }
    };
}

both_modes!(
    true_passes,
    exit_code_kept,
    signal_is_negative,
    output_captured,
    large_output_drained,
    env_is_exact,
    cwd_honoured,
    bare_name_uses_given_path,
    bare_name_missing,
    timeout_kills_everything,
    timeout_kills_detached_children,
    background_sleep_survivor,
    setsid_scrubbed_double_fork,
    classic_double_fork,
    closed_stdio_survivor,
    nonzero_exit_with_survivor,
    survivor_holding_stdout,
    many_survivors_all_killed,
    waited_background_passes,
    finished_children_pass,
);

#[test]
fn cgroup_v2_is_available_here() {
    assert_eq!(available_containment(), Containment::CgroupV2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_uses_the_strongest() {
    let e = go(check(ContainmentChoice::Auto, &["/bin/true"])).await;
    assert_eq!(e.exit_code, 0);
    assert_eq!(e.containment, Containment::CgroupV2);
}

#[test]
fn containment_names() {
    assert_eq!(Containment::CgroupV2.as_str(), "cgroup-v2");
    assert_eq!(Containment::Subreaper.as_str(), "subreaper+pgid+pidfd");
    assert_eq!(
        "auto".parse::<ContainmentChoice>().unwrap(),
        ContainmentChoice::Auto
    );
    assert_eq!(
        "cgroup".parse::<ContainmentChoice>().unwrap(),
        ContainmentChoice::CgroupV2
    );
    assert_eq!(
        "subreaper".parse::<ContainmentChoice>().unwrap(),
        ContainmentChoice::Subreaper
    );
    assert!("none".parse::<ContainmentChoice>().is_err());
    if std::env::var_os("SLM_CHECK_CONTAINMENT").is_none() {
        assert_eq!(ContainmentChoice::from_env(), ContainmentChoice::Auto);
    }
}
