//! The SLM benchmark harness behind `slm bench [--quick] [--json]`.
//!
//! [`run`] measures every area in this process and returns one JSON object.
//! Every figure is `{"median", "p99", "n"}` in the unit its name says:
//!
//! - the [`engine`] area: `engine.per_lap_us` (durable SQLite ledger) and
//!   `engine.per_lap_us_memory` (in-memory ledger);
//! - the [`receipt`] area: `receipt.check_ms`, `receipt.gate_eval_ms`,
//!   `receipt.register_ms` for the artifact sets small, 1k and 200mb;
//! - the [`watch`] area: `watch.done_after_receipt_ms`;
//! - the [`recall`] area: `recall.at_100k_ms` (and
//!   `recall.at_100k_ms_postgres` with [`Options::postgres`]);
//! - the [`bridge`] area: `bridge.overhead_ms` (or `{"skipped": why}`);
//! - the [`watchers`] area: `watchers` = `{"watchers", "cpu_percent", "rss_mb"}`;
//!
//! plus `machine` and `details` (breakdowns and run parameters). Benchmarks
//! measure; nothing here asserts a timing. [`text_report`] renders the
//! object as one line per figure against its goal ([`GOALS`]).

pub mod bridge;
pub mod engine;
pub mod recall;
pub mod receipt;
pub mod watch;
pub mod watchers;

use std::time::Instant;

use serde_json::{Map, Value, json};

/// What to run.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Fewer samples and smaller setups: the whole run stays under 5 minutes
    /// on 2 cores.
    pub quick: bool,
    /// Only these areas (`engine`, `receipt`, `watch`, `recall`, `bridge`,
    /// `watchers`); empty means all.
    pub only: Vec<String>,
    /// A PostgreSQL URL that may create databases: recall is then also
    /// measured on a throwaway database there.
    pub postgres: Option<String>,
}

impl Options {
    pub fn quick(quick: bool) -> Self {
        Self {
            quick,
            ..Self::default()
        }
    }

    pub fn only(quick: bool, area: &str) -> Self {
        Self {
            quick,
            only: vec![area.to_string()],
            ..Self::default()
        }
    }

    fn wants(&self, area: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|a| a == area)
    }
}

/// The areas in the order they run. Watchers measure the whole process's CPU
/// and RSS, so nothing else may run then; recall comes last because a call
/// that exceeds its cap leaves its statement running.
pub const AREAS: [&str; 6] = ["engine", "receipt", "watch", "bridge", "watchers", "recall"];

/// Runs the benchmarks `opts` selects and returns the figures as one object.
pub async fn run(opts: Options) -> Value {
    let wall = Instant::now();
    let load_at_start = loadavg();
    let mut out = Map::new();
    let mut details = Map::new();
    let mut timings = Map::new();
    for area in AREAS {
        if !opts.wants(area) {
            continue;
        }
        let t = Instant::now();
        let (figures, detail) = match area {
            "engine" => engine::run(opts.quick).await,
            "receipt" => receipt::run(opts.quick).await,
            "watch" => watch::run(opts.quick).await,
            "recall" => recall::run(opts.quick, opts.postgres.as_deref()).await,
            "bridge" => bridge::run(opts.quick).await,
            "watchers" => watchers::run(opts.quick).await,
            _ => unreachable!(),
        };
        if let Value::Object(m) = figures {
            out.extend(m);
        }
        details.insert(area.into(), detail);
        timings.insert(area.into(), json!(round(t.elapsed().as_secs_f64(), 2)));
    }
    out.insert("machine".into(), machine());
    details.insert(
        "run".into(),
        json!({
            "quick": opts.quick,
            "areas_s": timings,
            "total_s": round(wall.elapsed().as_secs_f64(), 2),
            "loadavg_at_start": load_at_start,
            "loadavg_at_end": loadavg(),
            "slm_bench_version": env!("CARGO_PKG_VERSION"),
            "date": slm_runtime::time::now_iso(),
        }),
    );
    out.insert("details".into(), Value::Object(details));
    Value::Object(out)
}

/// Rounds to `places` decimals.
pub fn round(x: f64, places: i32) -> f64 {
    let f = 10f64.powi(places);
    (x * f).round() / f
}

/// `{"median", "p99", "n"}` of samples: the median (the mean of the two
/// middle samples for an even count) and the nearest-rank 99th percentile,
/// rounded to 3 decimals.
pub fn summary(mut samples: Vec<f64>) -> Value {
    if samples.is_empty() {
        return json!({"median": null, "p99": null, "n": 0});
    }
    samples.sort_by(f64::total_cmp);
    let n = samples.len();
    let median = if n % 2 == 1 {
        samples[n / 2]
    } else {
        (samples[n / 2 - 1] + samples[n / 2]) / 2.0
    };
    let rank = ((0.99 * n as f64).ceil() as usize).clamp(1, n);
    json!({"median": round(median, 3), "p99": round(samples[rank - 1], 3), "n": n})
}

/// [`summary`] plus the mean (what a run's wall time adds up to).
pub fn summary_mean(samples: Vec<f64>) -> Value {
    let mean = samples.iter().sum::<f64>() / samples.len().max(1) as f64;
    let mut v = summary(samples);
    v["mean"] = json!(round(mean, 3));
    v
}

pub fn micros(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e6
}

pub fn millis(start: Instant) -> f64 {
    start.elapsed().as_secs_f64() * 1e3
}

/// `/proc/loadavg`'s 1-, 5- and 15-minute load averages: other work on the
/// machine skews every figure.
pub fn loadavg() -> Value {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let v: Vec<f64> = text
        .split_whitespace()
        .take(3)
        .filter_map(|x| x.parse().ok())
        .collect();
    json!(v)
}

/// nproc, CPU model, kernel, memory and the temporary directory's file
/// system (where every benchmark keeps its databases and projects).
pub fn machine() -> Value {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let mem_mb = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map(|kb| kb / 1024);
    let tmp = std::env::temp_dir();
    json!({
        "nproc": nproc,
        "cpu": cpu,
        "kernel": kernel,
        "mem_mb": mem_mb,
        "tmp_dir": tmp.display().to_string(),
        "tmp_fs": fs_type(&tmp),
    })
}

/// The file system type of the longest mount point containing `path`.
fn fs_type(path: &std::path::Path) -> String {
    let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "unknown".into();
    };
    mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let _dev = f.next()?;
            let at = f.next()?;
            let ty = f.next()?;
            path.starts_with(at).then(|| (at.len(), ty.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map_or_else(|| "unknown".into(), |(_, ty)| ty)
}

/// A goal: the figure (a path of keys), the bound and its unit.
pub struct Goal {
    pub figure: &'static str,
    /// Key path inside the figure: `["1k"]` for `receipt.check_ms.1k`.
    pub sub: Option<&'static str>,
    /// The field compared (`median`, `cpu_percent`, `rss_mb`).
    pub field: &'static str,
    /// At most this.
    pub max: Option<f64>,
    pub unit: &'static str,
    /// The reference (SLM 4.2.11) measured on this machine kind, as text.
    pub reference: &'static str,
}

const fn goal(
    figure: &'static str,
    sub: Option<&'static str>,
    field: &'static str,
    max: Option<f64>,
    unit: &'static str,
    reference: &'static str,
) -> Goal {
    Goal {
        figure,
        sub,
        field,
        max,
        unit,
        reference,
    }
}

/// Every figure `slm bench` prints, with its goal where the issue sets one.
/// A figure meets its goal when its median (for watchers: cpu_percent and
/// rss_mb) is at most the bound.
pub const GOALS: &[Goal] = &[
    goal("engine.per_lap_us", None, "median", Some(50.0), "µs", ""),
    goal("engine.per_lap_us_memory", None, "median", None, "µs", ""),
    goal(
        "receipt.check_ms",
        Some("small"),
        "median",
        Some(3.0),
        "ms",
        "28–49",
    ),
    goal(
        "receipt.check_ms",
        Some("1k"),
        "median",
        Some(60.0),
        "ms",
        "600–2,000",
    ),
    goal(
        "receipt.check_ms",
        Some("200mb"),
        "median",
        Some(250.0),
        "ms",
        "880–950",
    ),
    goal(
        "receipt.gate_eval_ms",
        Some("small"),
        "median",
        None,
        "ms",
        "",
    ),
    goal(
        "receipt.gate_eval_ms",
        Some("1k"),
        "median",
        Some(10.0),
        "ms",
        "190–630",
    ),
    goal(
        "receipt.gate_eval_ms",
        Some("200mb"),
        "median",
        None,
        "ms",
        "",
    ),
    goal(
        "receipt.register_ms",
        Some("small"),
        "median",
        None,
        "ms",
        "",
    ),
    goal(
        "receipt.register_ms",
        Some("1k"),
        "median",
        Some(30.0),
        "ms",
        "200–310",
    ),
    goal(
        "watch.done_after_receipt_ms",
        None,
        "median",
        Some(20.0),
        "ms",
        "",
    ),
    goal("recall.at_100k_ms", None, "median", Some(5.0), "ms", ""),
    goal(
        "recall.at_100k_ms_postgres",
        None,
        "median",
        Some(5.0),
        "ms",
        "",
    ),
    goal("bridge.overhead_ms", None, "median", None, "ms", ""),
    goal(
        "watchers",
        None,
        "cpu_percent",
        Some(100.0),
        "% of one core",
        "",
    ),
    goal("watchers", None, "rss_mb", Some(200.0), "MB", ""),
];

/// Whether `v` meets `g`: Some(true/false), or None when there is no goal or
/// no figure.
pub fn meets(g: &Goal, v: &Value) -> Option<bool> {
    if g.max.is_some() && figure(g, v).is_some_and(|f| f.get("timed_out").is_some()) {
        return Some(false);
    }
    let x = figure(g, v)?.get(g.field)?.as_f64()?;
    g.max.map(|max| x <= max)
}

fn figure<'a>(g: &Goal, v: &'a Value) -> Option<&'a Value> {
    let f = v.get(g.figure)?;
    match g.sub {
        Some(s) => f.get(s),
        None => Some(f),
    }
}

/// One line per figure: its value, its goal and ✓/✗ (– without a goal).
pub fn text_report(v: &Value) -> String {
    let mut out = String::new();
    for g in GOALS {
        let name = match g.sub {
            Some(s) => format!("{}.{s}", g.figure),
            None => g.figure.to_string(),
        };
        let Some(f) = figure(g, v) else {
            continue;
        };
        let value = if let Some(why) = f.get("skipped").and_then(Value::as_str) {
            format!("skipped: {why}")
        } else if let Some(t) = f.get("timed_out") {
            format!(
                "a call took > {} ms ({} done before)",
                t.get("after_ms").unwrap_or(&Value::Null),
                f.get("n").unwrap_or(&Value::Null)
            )
        } else if g.figure == "watchers" {
            let x = f.get(g.field).and_then(Value::as_f64).unwrap_or(f64::NAN);
            format!(
                "{} = {x} {} ({} watchers)",
                g.field,
                g.unit,
                f.get("watchers").unwrap_or(&Value::Null)
            )
        } else {
            format!(
                "median {} p99 {} n {} {}",
                f.get("median").unwrap_or(&Value::Null),
                f.get("p99").unwrap_or(&Value::Null),
                f.get("n").unwrap_or(&Value::Null),
                g.unit
            )
        };
        let verdict = match (g.max, meets(g, v)) {
            (Some(max), Some(ok)) => {
                format!("goal ≤ {max} {}  {}", g.unit, if ok { "✓" } else { "✗" })
            }
            (Some(max), None) => format!("goal ≤ {max} {}  ?", g.unit),
            (None, _) => "no goal  –".to_string(),
        };
        let name = if g.figure == "watchers" {
            format!("watchers.{}", g.field)
        } else {
            name
        };
        out.push_str(&format!("{name:<32} {value:<48} {verdict}\n"));
    }
    if let Some(m) = v.get("machine") {
        out.push_str(&format!(
            "machine: {} × {}, kernel {}, tmp on {}\n",
            m.get("nproc").unwrap_or(&Value::Null),
            m.get("cpu").and_then(Value::as_str).unwrap_or("?"),
            m.get("kernel").and_then(Value::as_str).unwrap_or("?"),
            m.get("tmp_fs").and_then(Value::as_str).unwrap_or("?"),
        ));
    }
    if let Some(r) = v.get("details").and_then(|d| d.get("run")) {
        out.push_str(&format!(
            "load average at start {} / end {}; total {} s{}\n",
            r.get("loadavg_at_start").unwrap_or(&Value::Null),
            r.get("loadavg_at_end").unwrap_or(&Value::Null),
            r.get("total_s").unwrap_or(&Value::Null),
            if r.get("quick").and_then(Value::as_bool) == Some(true) {
                " (--quick)"
            } else {
                ""
            },
        ));
    }
    out
}
