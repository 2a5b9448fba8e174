//! MCP tool-argument decoding (services/gateway/src/args.rs and the whole-call
//! validators in gateway.rs).
//!
//! Input: arbitrary bytes, parsed as JSON. An object is taken as a tool
//! call's `arguments`; any other value is checked alone and as the value of
//! every argument name. Nothing may panic, and every accepted value must
//! respect the documented conversion and clamping rules.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Map, Value};
use slm_gateway::args::{Args, py_float, py_int, py_repr};
use slm_gateway::tools::{
    LOOP_HISTORY_ARGS, LOOP_RUN_ARGS, LOOP_SHOW_ARGS, OBSERVE_ARGS, RECALL_ARGS, REMEMBER_ARGS,
};
use slm_gateway::{WatchLimits, read_request, watch_spec};

/// Longest error text the gateway may build from one argument: the quoted
/// value is shortened to 200 characters, each escaped to at most 6.
const MAX_ERROR_CHARS: usize = 200 * 6 + 400;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let map = match v {
        Value::Object(m) => m,
        other => {
            check_scalar(&other);
            // The same value under every argument name of every tool.
            let mut m = Map::new();
            for k in LOOP_RUN_ARGS
                .iter()
                .chain(LOOP_HISTORY_ARGS)
                .chain(LOOP_SHOW_ARGS)
                .chain(REMEMBER_ARGS)
                .chain(RECALL_ARGS)
            {
                m.insert((*k).to_string(), other.clone());
            }
            m
        }
    };
    for val in map.values() {
        check_scalar(val);
    }
    check_reader(&map);
    check_watch_spec(&map);
    check_read_request(&map, LOOP_HISTORY_ARGS, "name", 20, 200);
    check_read_request(&map, LOOP_SHOW_ARGS, "run_id", 200, 1000);
    check_remember(&map);
    check_recall(&map);
});

fn check_error(e: &str, map: &Map<String, Value>) {
    assert!(!e.is_empty(), "empty error text");
    // `only` names every unknown argument (each quoted value shortened):
    // bounded per argument, not in total.
    let bound = MAX_ERROR_CHARS * (1 + map.len());
    assert!(
        e.chars().count() <= bound,
        "error text not bounded: {} chars",
        e.chars().count()
    );
}

/// `py_repr` is quoted, escapes every control character and is shortened.
fn check_repr(s: &str) {
    let r = py_repr(s);
    let q = r.chars().next().expect("a repr is quoted");
    assert!(q == '\'' || q == '"', "{r:?}");
    assert!(r.ends_with(q) && r.chars().count() >= 2, "{r:?}");
    assert!(
        !r.chars().any(char::is_control),
        "raw control char in {r:?}"
    );
    assert!(r.chars().count() <= 200 * 6 + 3, "repr not shortened");
    if s.chars().count() <= 200 && !s.chars().any(|c| c.is_control() || c == '\\' || c == q) {
        // Nothing to escape: the text is shown as is.
        assert_eq!(&r[q.len_utf8()..r.len() - q.len_utf8()], s);
    }
}

/// Python's `float()` / `int()` on one JSON value.
fn check_scalar(v: &Value) {
    let f = py_float(v);
    let i = py_int(v);
    match v {
        Value::Bool(b) => {
            assert_eq!(f, Ok(if *b { 1.0 } else { 0.0 }));
            assert_eq!(i, Ok(i128::from(*b)));
        }
        Value::Number(n) => {
            // JSON numbers are finite, so both conversions succeed.
            let fv = f.expect("a JSON number converts to float");
            assert!(fv.is_finite());
            assert_eq!(Some(fv), n.as_f64());
            let iv = i.expect("a JSON number converts to int");
            if let Some(x) = n.as_i64() {
                assert_eq!(iv, i128::from(x));
            } else if let Some(x) = n.as_u64() {
                assert_eq!(iv, i128::from(x));
            } else {
                // Truncation toward zero (saturating).
                assert_eq!(iv, fv.trunc() as i128);
                assert!(iv.unsigned_abs() as f64 <= fv.abs());
            }
        }
        Value::String(s) => {
            check_repr(s);
            match &f {
                Ok(_) => {}
                Err(e) => {
                    check_error(e, &Map::new());
                    assert!(e.starts_with("could not convert string to float: "), "{e}");
                }
            }
            match &i {
                Ok(n) => {
                    // Every int() literal is also a float() literal.
                    let fv = f.clone().expect("int() accepted what float() refused");
                    let cleaned: String = s
                        .trim_matches(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
                        .chars()
                        .filter(|c| *c != '_')
                        .collect();
                    let digits = cleaned.trim_start_matches(['+', '-']);
                    assert!(
                        !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()),
                        "int() accepted {s:?}"
                    );
                    match cleaned.parse::<i128>() {
                        Ok(m) => assert_eq!(*n, m, "{s:?}"),
                        Err(_) => assert_eq!(n.unsigned_abs(), i128::MAX as u128, "{s:?}"),
                    }
                    if n.unsigned_abs() < (1u128 << 53) {
                        assert_eq!(fv, *n as f64, "float({s:?}) != int({s:?})");
                    }
                }
                Err(e) => {
                    check_error(e, &Map::new());
                    assert!(
                        e.starts_with("invalid literal for int() with base 10: "),
                        "{e}"
                    );
                }
            }
        }
        Value::Null | Value::Array(_) | Value::Object(_) => {
            let ty = match v {
                Value::Null => "NoneType",
                Value::Array(_) => "list",
                _ => "dict",
            };
            assert_eq!(
                f,
                Err(format!(
                    "float() argument must be a string or a real number, not '{ty}'"
                ))
            );
            assert!(i.as_ref().unwrap_err().ends_with(&format!("not '{ty}'")));
        }
    }
}

/// The reader itself, for every present key and a few absent ones.
fn check_reader(map: &Map<String, Value>) {
    let a = Args::new(map);
    for accepted in [
        LOOP_RUN_ARGS,
        LOOP_HISTORY_ARGS,
        LOOP_SHOW_ARGS,
        REMEMBER_ARGS,
        RECALL_ARGS,
        OBSERVE_ARGS,
    ] {
        let unknown: Vec<&String> = map
            .keys()
            .filter(|k| !accepted.contains(&k.as_str()))
            .collect();
        match a.only(accepted) {
            Ok(()) => assert!(unknown.is_empty()),
            Err(e) => {
                assert!(!unknown.is_empty());
                assert!(e.starts_with("unexpected argument"), "{e}");
                for k in unknown {
                    assert!(e.contains(&py_repr(k)), "{e} does not name {k:?}");
                }
            }
        }
    }
    let absent = "\u{0}absent\u{0}";
    let keys: Vec<&str> = map
        .keys()
        .map(String::as_str)
        .chain([absent])
        .take(64)
        .collect();
    for key in keys {
        let v = map.get(key);
        match a.text(key) {
            Ok(None) => assert!(v.is_none()),
            Ok(Some(s)) => assert_eq!(v, Some(&Value::String(s.to_string()))),
            Err(e) => {
                assert!(v.is_some_and(|v| !v.is_string()));
                assert_eq!(e, format!("{key} must be text"));
            }
        }
        match a.boolean(key, true) {
            Ok(b) => match v {
                None => assert!(b),
                Some(Value::Bool(x)) => assert_eq!(b, *x),
                Some(Value::Number(n)) => assert_eq!(b, n.as_f64() != Some(0.0)),
                Some(Value::String(s)) => {
                    let t = s.trim().to_ascii_lowercase();
                    let truthy = ["true", "1", "yes"].contains(&t.as_str());
                    let falsy = ["false", "0", "no", ""].contains(&t.as_str());
                    assert!(truthy || falsy, "boolean accepted {s:?}");
                    assert_eq!(b, truthy);
                }
                Some(other) => panic!("boolean accepted {other}"),
            },
            Err(e) => assert_eq!(e, format!("{key} must be true or false")),
        }
        match a.text_list(key) {
            Ok(list) => match v {
                None => assert!(list.is_empty()),
                Some(Value::String(s)) => assert_eq!(list, vec![s.clone()]),
                Some(Value::Array(items)) => {
                    assert_eq!(list.len(), items.len());
                    for (got, item) in list.iter().zip(items) {
                        assert_eq!(Some(got.as_str()), item.as_str());
                    }
                }
                Some(other) => panic!("text_list accepted {other}"),
            },
            Err(e) => assert_eq!(e, format!("{key} must be a list of text")),
        }
        let default_i = -7_i128;
        match (a.int(key, default_i), v) {
            (Ok(n), None) => assert_eq!(n, default_i),
            (r, Some(v)) => assert_eq!(r, py_int(v)),
            (Err(e), None) => panic!("absent int refused: {e}"),
        }
        match (a.float(key, 0.5), v) {
            (Ok(f), None) => assert_eq!(f, 0.5),
            (r, Some(v)) => {
                let want = py_float(v);
                match (&r, &want) {
                    (Ok(x), Ok(y)) => assert!(x == y || (x.is_nan() && y.is_nan())),
                    _ => assert_eq!(r, want),
                }
            }
            (Err(e), None) => panic!("absent float refused: {e}"),
        }
    }
}

/// `slm_loop_run` (spec WATCH-01/02): the clamped limits.
fn check_watch_spec(map: &Map<String, Value>) {
    let spec = match watch_spec(map) {
        Ok(spec) => spec,
        Err(e) => {
            check_error(&e, map);
            return;
        }
    };
    assert!(Args::new(map).only(LOOP_RUN_ARGS).is_ok());
    let n = spec.name.chars().count();
    assert!((1..=128).contains(&n) && spec.name.trim() == spec.name);
    let q = spec.gate_query.chars().count();
    assert!((1..=2000).contains(&q) && spec.gate_query.trim() == spec.gate_query);
    assert!((1..=200).contains(&spec.max_iterations));
    let wall = spec.max_wallclock_s;
    assert!(
        wall == 0.0 || (wall > 0.0 && wall <= 120.0),
        "max_wallclock_s {wall}"
    );
    let poll = spec.poll_interval_s;
    let cap = if wall > 0.0 { wall.max(0.25) } else { 120.0 };
    assert!(
        poll >= 0.25 && poll <= cap,
        "poll_interval_s {poll} (wall {wall})"
    );
    assert!(spec.max_tokens >= 0);
    assert!(spec.agent_id.is_empty());
    match map.get("gate_contract") {
        None | Some(Value::Null) => assert!(spec.contract_json.is_empty()),
        Some(c) => {
            let back: Value = serde_json::from_str(&spec.contract_json)
                .expect("gate_contract is passed on as JSON");
            assert_eq!(canonical(&back), canonical(c));
        }
    }
    // Defaults when absent (spec WATCH-01).
    if !map.contains_key("max_iterations") {
        assert_eq!(spec.max_iterations, 20);
    }
    if !map.contains_key("max_tokens") {
        assert_eq!(spec.max_tokens, 0);
    }
    if !map.contains_key("require_support") {
        assert!(!spec.require_support);
    }
    // The clamp is idempotent.
    let again = WatchLimits::clamp(
        i128::from(spec.max_iterations),
        spec.max_wallclock_s,
        spec.poll_interval_s,
        i128::from(spec.max_tokens),
        i128::from(spec.no_progress_window),
    );
    assert_eq!(again.max_iterations, spec.max_iterations);
    assert_eq!(again.max_wallclock_s, spec.max_wallclock_s);
    assert_eq!(again.poll_interval_s, spec.poll_interval_s);
    assert_eq!(again.max_tokens, spec.max_tokens);
    assert_eq!(again.no_progress_window, spec.no_progress_window);
}

/// Key order is not part of the value: compare sorted renderings.
fn canonical(v: &Value) -> String {
    slm_bridge::domain::canon(v)
}

/// `slm_loop_history` / `slm_loop_show` (spec MCP-06/07/08).
fn check_read_request(
    map: &Map<String, Value>,
    allowed: &[&str],
    key: &str,
    default_limit: i128,
    max: i128,
) {
    match read_request(map, allowed, key, default_limit, max) {
        Ok((value, limit, profile)) => {
            assert!(!value.is_empty() && value.trim() == value);
            assert!(i128::from(limit) >= 1 && i128::from(limit) <= max);
            if !map.contains_key("limit") {
                assert_eq!(i128::from(limit), default_limit);
            }
            match map.get("profile_id") {
                None => assert!(profile.is_empty()),
                Some(v) => assert_eq!(v.as_str(), Some(profile.as_str())),
            }
        }
        Err(e) => check_error(&e, map),
    }
}

/// The argument steps of `remember` (gateway.rs, inline in the tool).
fn check_remember(map: &Map<String, Value>) {
    let a = Args::new(map);
    let parsed = (|| -> Result<_, String> {
        a.only(REMEMBER_ARGS)?;
        let content = a
            .text("content")?
            .ok_or_else(|| "content is required".to_string())?;
        let tags = a.text_list("tags")?;
        let importance = a
            .int("importance", 0)?
            .clamp(i128::from(i32::MIN), i128::from(i32::MAX)) as i32;
        Ok((content, tags, importance))
    })();
    if let Ok((content, _tags, importance)) = parsed {
        assert_eq!(map.get("content").and_then(Value::as_str), Some(content));
        if !map.contains_key("importance") {
            assert_eq!(importance, 0);
        }
    }
}

/// The argument steps of `recall` (gateway.rs, inline in the tool).
fn check_recall(map: &Map<String, Value>) {
    let a = Args::new(map);
    let limit = a.int("limit", 10).map(|n| n.clamp(1, 100) as u32);
    if let Ok(limit) = limit {
        assert!((1..=100).contains(&limit));
        if !map.contains_key("limit") {
            assert_eq!(limit, 10);
        }
    }
}
