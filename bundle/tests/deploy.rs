//! The deployment files agree with each other and with the binary:
//! docker-compose.yml (one container per service on PostgreSQL), the env
//! files it loads, the systemd units of a non-container install, the
//! collector configuration and the Dockerfile. No Docker engine is needed;
//! the compose healthcheck command itself is run against a real `slm serve`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_yaml_ng::Value;

/// The services `slm serve --only` runs, with the variable that points at
/// each (the gateway is reached over HTTP, not by peers).
const SERVICES: [(&str, Option<&str>); 5] = [
    ("ledger", Some("SLM_LEDGER_URL")),
    ("receipt", Some("SLM_RECEIPT_URL")),
    ("loop-engine", Some("SLM_LOOP_ENGINE_URL")),
    ("bridge", Some("SLM_BRIDGE_URL")),
    ("gateway", None),
];

/// Which peers each service needs.
const NEEDS: [(&str, &[&str]); 5] = [
    ("ledger", &[]),
    ("receipt", &[]),
    ("loop-engine", &["ledger", "receipt"]),
    ("bridge", &[]),
    ("gateway", &["ledger", "receipt", "loop-engine", "bridge"]),
];

/// Services with a database of their own.
const WITH_DATABASE: [&str; 3] = ["ledger", "receipt", "bridge"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .into()
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml(rel: &str) -> Value {
    serde_yaml_ng::from_str(&read(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn var_for(service: &str) -> &'static str {
    SERVICES
        .iter()
        .find(|(s, _)| *s == service)
        .and_then(|(_, v)| *v)
        .unwrap_or_else(|| panic!("{service} has no URL variable"))
}

fn needs(service: &str) -> &'static [&'static str] {
    NEEDS.iter().find(|(s, _)| *s == service).unwrap().1
}

fn strs(v: &Value) -> Vec<String> {
    v.as_sequence()
        .unwrap_or_else(|| panic!("expected a list, got {v:?}"))
        .iter()
        .map(|x| x.as_str().expect("a string").to_string())
        .collect()
}

/// `--flag VALUE` in an argv.
fn flag(argv: &[String], name: &str) -> Option<String> {
    argv.iter()
        .position(|a| a == name)
        .map(|i| argv.get(i + 1).cloned().expect("flag without value"))
}

fn port_of(addr: &str) -> u16 {
    addr.rsplit_once(':').unwrap().1.parse().unwrap()
}

/// `http://HOST:PORT` → (HOST, PORT).
fn http_url(url: &str) -> (String, u16) {
    let rest = url
        .strip_prefix("http://")
        .unwrap_or_else(|| panic!("{url}: not http://"));
    let (host, port) = rest
        .trim_end_matches('/')
        .rsplit_once(':')
        .unwrap_or_else(|| panic!("{url}: no port"));
    (host.to_string(), port.parse().unwrap())
}

/// Host and port of a `postgres://user:pw@HOST:PORT/db` URL.
fn postgres_host(url: &str) -> (String, u16) {
    let rest = url.strip_prefix("postgres://").expect("postgres:// URL");
    let at = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    let hostport = at.split('/').next().unwrap();
    let (h, p) = hostport.rsplit_once(':').unwrap_or((hostport, "5432"));
    (h.to_string(), p.parse().unwrap())
}

/// A `KEY=value` env file (comments and blank lines aside), as
/// docker compose and systemd's EnvironmentFile read it.
fn env_file(rel: &str) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for (n, line) in read(rel).lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{rel}:{}: not KEY=value: {line}", n + 1));
        assert!(
            !k.is_empty()
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !k.starts_with(|c: char| c.is_ascii_digit()),
            "{rel}:{}: bad key {k:?}",
            n + 1
        );
        assert!(
            !v.starts_with(' ') && !v.contains(char::is_whitespace),
            "{rel}:{}: value with spaces",
            n + 1
        );
        assert!(
            vars.insert(k.to_string(), v.to_string()).is_none(),
            "{rel}: {k} twice"
        );
    }
    vars
}

struct ComposeService<'a> {
    name: &'a str,
    def: &'a Value,
}

impl ComposeService<'_> {
    fn get(&self, key: &str) -> Option<&Value> {
        self.def.get(key)
    }

    fn argv(&self) -> Vec<String> {
        strs(
            self.get("command")
                .unwrap_or_else(|| panic!("{}: no command", self.name)),
        )
    }

    /// env_file entries, then `environment` on top (as compose merges).
    fn env(&self) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        let files = match self.get("env_file") {
            None => vec![],
            Some(Value::String(s)) => vec![s.clone()],
            Some(v) => strs(v),
        };
        for f in files {
            env.extend(env_file(&f));
        }
        if let Some(map) = self.get("environment").and_then(Value::as_mapping) {
            for (k, v) in map {
                let v = match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => serde_yaml_ng::to_string(other).unwrap().trim().into(),
                };
                env.insert(k.as_str().unwrap().to_string(), v);
            }
        }
        env
    }

    /// `depends_on` as service → condition.
    fn depends_on(&self) -> BTreeMap<String, String> {
        match self.get("depends_on") {
            None => BTreeMap::new(),
            Some(Value::Mapping(m)) => m
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().unwrap().to_string(),
                        v.get("condition")
                            .and_then(Value::as_str)
                            .unwrap_or("service_started")
                            .to_string(),
                    )
                })
                .collect(),
            Some(v) => strs(v)
                .into_iter()
                .map(|s| (s, "service_started".to_string()))
                .collect(),
        }
    }

    /// The source of each mount (volume name or host path).
    fn mounts(&self) -> Vec<(String, String)> {
        self.get("volumes")
            .map(|v| {
                strs(v)
                    .into_iter()
                    .map(|m| {
                        let mut parts = m.splitn(3, ':');
                        (
                            parts.next().unwrap().to_string(),
                            parts.next().unwrap_or("").to_string(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    fn healthcheck_test(&self) -> Vec<String> {
        let hc = self
            .get("healthcheck")
            .unwrap_or_else(|| panic!("{}: no healthcheck", self.name));
        strs(hc.get("test").expect("healthcheck.test"))
    }
}

fn compose() -> Value {
    yaml("docker-compose.yml")
}

fn services(doc: &Value) -> BTreeMap<&str, ComposeService<'_>> {
    doc.get("services")
        .and_then(Value::as_mapping)
        .expect("services")
        .iter()
        .map(|(k, v)| {
            let name = k.as_str().unwrap();
            (name, ComposeService { name, def: v })
        })
        .collect()
}

/// The port a TCP healthcheck (`bash -c 'exec 3<>/dev/tcp/H/PORT'`) probes.
fn tcp_check_port(test: &[String]) -> u16 {
    assert_eq!(test[..3], ["CMD", "bash", "-c"], "healthcheck {test:?}");
    let probe = test[3]
        .strip_prefix("exec 3<>/dev/tcp/127.0.0.1/")
        .unwrap_or_else(|| panic!("healthcheck {test:?}"));
    probe.parse().unwrap()
}

#[test]
fn compose_runs_each_service_in_its_own_container() {
    let doc = compose();
    let svcs = services(&doc);
    let mut expected: BTreeSet<&str> = SERVICES.iter().map(|(s, _)| *s).collect();
    expected.insert("postgres");
    expected.insert("otel-collector");
    assert_eq!(svcs.keys().copied().collect::<BTreeSet<_>>(), expected);

    for (name, _) in SERVICES {
        let s = &svcs[name];
        let argv = s.argv();
        assert_eq!(argv[..3], ["serve", "--only", name], "{name}: {argv:?}");
        assert_eq!(
            flag(&argv, "--grpc").as_deref(),
            Some("0.0.0.0:50051"),
            "{name}"
        );
        let db = flag(&argv, "--database-url").unwrap_or_else(|| panic!("{name}: no db"));
        assert_eq!(postgres_host(&db), ("postgres".into(), 5432), "{name}");
        assert_eq!(
            flag(&argv, "--http").as_deref(),
            (name == "gateway").then_some("0.0.0.0:8080"),
            "{name}: --http"
        );
        // The same image, built once from deploy/Dockerfile.
        assert_eq!(s.get("image").and_then(Value::as_str), Some("slm:local"));
        let build = s.get("build").expect("build");
        assert_eq!(build.get("context").and_then(Value::as_str), Some("."));
        assert_eq!(
            build.get("dockerfile").and_then(Value::as_str),
            Some("deploy/Dockerfile")
        );
        let env = s.env();
        if let Some(url) = env.get("SLM_DATABASE_URL") {
            assert_eq!(url, &db, "{name}: env and --database-url differ");
        }
        assert_eq!(env["SLM_DATA_DIR"], "/var/lib/slm/data", "{name}");
        assert_eq!(env["OTEL_SERVICE_NAME"], format!("slm-{name}"));
        // Off unless the operator sets it for `docker compose`.
        assert_eq!(
            env["OTEL_EXPORTER_OTLP_ENDPOINT"],
            "${OTEL_EXPORTER_OTLP_ENDPOINT:-}"
        );
    }
}

#[test]
fn compose_peer_urls_point_at_running_services() {
    let doc = compose();
    let svcs = services(&doc);
    let grpc_port = |svc: &str| port_of(&flag(&svcs[svc].argv(), "--grpc").unwrap());
    for (name, _) in SERVICES {
        let s = &svcs[name];
        let env = s.env();
        let deps = s.depends_on();
        let mut peers = BTreeSet::new();
        for (var, url) in env.iter().filter(|(k, _)| k.ends_with("_URL")) {
            if var == "SLM_DATABASE_URL" {
                continue;
            }
            let (host, port) = http_url(url);
            assert!(svcs.contains_key(host.as_str()), "{name}: {var}={url}");
            assert_eq!(var_for(&host), var, "{name}: {var} names {host}");
            assert_eq!(port, grpc_port(&host), "{name}: {var}={url}");
            assert_eq!(
                deps.get(&host).map(String::as_str),
                Some("service_healthy"),
                "{name} must wait for {host}"
            );
            peers.insert(host);
        }
        let wanted: BTreeSet<String> = needs(name).iter().map(|s| s.to_string()).collect();
        assert_eq!(peers, wanted, "{name}: peers");
    }
}

#[test]
fn compose_postgres_is_healthy_before_services_start() {
    let doc = compose();
    let svcs = services(&doc);
    let pg = &svcs["postgres"];
    let test = pg.healthcheck_test();
    assert!(test.join(" ").contains("pg_isready"), "{test:?}");
    assert!(
        pg.mounts()
            .iter()
            .any(|(src, dst)| src == "pgdata" && dst == "/var/lib/postgresql/data")
    );
    let env = pg.env();
    for (name, _) in SERVICES {
        let deps = svcs[name].depends_on();
        assert_eq!(
            deps.get("postgres").map(String::as_str),
            Some("service_healthy"),
            "{name}"
        );
        let db = flag(&svcs[name].argv(), "--database-url").unwrap();
        assert_eq!(
            db,
            format!(
                "postgres://{}:{}@postgres:5432/{}",
                env["POSTGRES_USER"], env["POSTGRES_PASSWORD"], env["POSTGRES_DB"]
            )
        );
    }
}

#[test]
fn compose_healthchecks_probe_the_listening_port() {
    let doc = compose();
    let svcs = services(&doc);
    for (name, _) in SERVICES {
        let s = &svcs[name];
        let argv = s.argv();
        let listen = flag(
            &argv,
            if name == "gateway" {
                "--http"
            } else {
                "--grpc"
            },
        )
        .unwrap();
        assert_eq!(
            tcp_check_port(&s.healthcheck_test()),
            port_of(&listen),
            "{name}"
        );
    }
}

#[test]
fn compose_receipt_state_stays_in_the_receipt_container() {
    let doc = compose();
    let svcs = services(&doc);
    let receipt_mounts = svcs["receipt"].mounts();
    assert!(
        receipt_mounts
            .iter()
            .any(|(src, dst)| src == "receipt-data" && dst == "/var/lib/slm/data"),
        "{receipt_mounts:?}"
    );
    let declared = doc
        .get("volumes")
        .and_then(Value::as_mapping)
        .expect("top-level volumes");
    assert!(declared.contains_key("receipt-data"));
    for (name, s) in &svcs {
        if *name == "receipt" {
            continue;
        }
        for (src, dst) in s.mounts() {
            assert!(
                !receipt_mounts.iter().any(|(r, _)| *r == src),
                "{name} mounts the receipt service's {src}"
            );
            assert!(
                !dst.contains("loop-admission"),
                "{name} mounts {dst}: the signing key and token stay in receipt"
            );
        }
        let env = s.env();
        for k in ["SLM_OPERATOR_TOKEN", "SLM_OPERATOR_TOKEN_FILE"] {
            assert!(!env.contains_key(k), "{name} holds {k}");
        }
    }
}

#[test]
fn compose_publishes_only_the_gateway_on_loopback() {
    let doc = compose();
    let svcs = services(&doc);
    for (name, s) in &svcs {
        let Some(ports) = s.get("ports") else {
            continue;
        };
        assert_eq!(*name, "gateway", "{name} publishes {ports:?}");
        let ports = strs(ports);
        assert_eq!(ports, ["127.0.0.1:8080:8080"]);
    }
    let http = flag(&svcs["gateway"].argv(), "--http").unwrap();
    assert_eq!(port_of(&http), 8080);
    // Other containers may use the compose name (loopback Hosts always pass).
    let allowed = svcs["gateway"].env()["SLM_HTTP_ALLOWED_HOSTS"].clone();
    assert!(
        allowed.split(',').any(|h| h.trim() == "gateway"),
        "{allowed}"
    );
    for s in svcs.values() {
        assert!(s.get("network_mode").is_none(), "no host networking");
    }
}

#[test]
fn compose_collector_is_optional_and_configured() {
    let doc = compose();
    let svcs = services(&doc);
    let c = &svcs["otel-collector"];
    assert_eq!(strs(c.get("profiles").expect("profiles")), ["otel"]);
    let (src, dst) = c.mounts().into_iter().next().expect("config mount");
    assert_eq!(src, "./deploy/otel-collector.yaml");
    assert_eq!(dst, "/etc/otelcol/config.yaml");
    assert!(
        strs(c.get("command").unwrap())
            .iter()
            .any(|a| a == &format!("--config={dst}"))
    );

    let cfg = yaml("deploy/otel-collector.yaml");
    let grpc = &cfg["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"];
    assert_eq!(grpc.as_str(), Some("0.0.0.0:4317"));
    let traces = &cfg["service"]["pipelines"]["traces"];
    for (section, key) in [
        ("receivers", "receivers"),
        ("processors", "processors"),
        ("exporters", "exporters"),
    ] {
        let listed = strs(&traces[key]);
        assert!(!listed.is_empty() || section == "processors");
        for component in listed {
            assert!(
                cfg[section].get(component.as_str()).is_some(),
                "{component} is not defined under {section}"
            );
        }
    }
    // The services send to the collector's gRPC port (docker-compose.yml).
    assert!(read("docker-compose.yml").contains("http://otel-collector:4317"));
}

#[test]
fn env_files_parse_and_match_the_services() {
    let dir = repo().join("deploy/env");
    let mut seen = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let file = path.file_name().unwrap().to_str().unwrap().to_string();
        let service = file.strip_suffix(".env").expect(".env file");
        assert!(
            SERVICES.iter().any(|(s, _)| *s == service),
            "{file}: no such service"
        );
        let env = env_file(&format!("deploy/env/{file}"));
        assert_eq!(env["OTEL_SERVICE_NAME"], format!("slm-{service}"));
        assert_eq!(
            env.contains_key("SLM_DATABASE_URL"),
            WITH_DATABASE.contains(&service),
            "{file}"
        );
        seen.insert(service.to_string());
    }
    let all: BTreeSet<String> = SERVICES.iter().map(|(s, _)| s.to_string()).collect();
    assert_eq!(seen, all);
}

/// A systemd unit: section → key → values (a key may repeat).
type Unit = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn unit(rel: &str) -> Unit {
    let mut u = Unit::new();
    let mut section = None;
    for (n, line) in read(rel).lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(s.to_string());
            u.entry(s.to_string()).or_default();
            continue;
        }
        let s = section
            .clone()
            .unwrap_or_else(|| panic!("{rel}:{}: outside a section", n + 1));
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("{rel}:{}: not Key=value", n + 1));
        u.get_mut(&s)
            .unwrap()
            .entry(k.trim().to_string())
            .or_default()
            .push(v.trim().to_string());
    }
    for s in ["Unit", "Service", "Install"] {
        assert!(u.contains_key(s), "{rel}: no [{s}]");
    }
    u
}

fn one<'a>(u: &'a Unit, section: &str, key: &str) -> &'a str {
    let v = &u[section]
        .get(key)
        .unwrap_or_else(|| panic!("no {section}.{key}"));
    assert_eq!(v.len(), 1, "{section}.{key} repeats");
    &v[0]
}

fn unit_env(u: &Unit) -> BTreeMap<String, String> {
    u["Service"]
        .get("Environment")
        .into_iter()
        .flatten()
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("Environment=K=V");
            (k.to_string(), v.to_string())
        })
        .collect()
}

#[test]
fn systemd_units_agree_on_ports_and_keep_the_receipt_apart() {
    let mut units = BTreeMap::new();
    for (name, _) in SERVICES {
        units.insert(name, unit(&format!("deploy/systemd/slm-{name}.service")));
    }
    let mut grpc = BTreeMap::new();
    let mut listening = BTreeSet::new();
    for (name, u) in &units {
        let exec: Vec<String> = one(u, "Service", "ExecStart")
            .split_whitespace()
            .map(str::to_string)
            .collect();
        assert_eq!(exec[..4], ["/usr/local/bin/slm", "serve", "--only", name]);
        let addr = flag(&exec, "--grpc").unwrap();
        assert!(addr.starts_with("127.0.0.1:"), "{name}: {addr}");
        assert!(listening.insert(port_of(&addr)), "{name}: port taken");
        grpc.insert(*name, port_of(&addr));
        if let Some(http) = flag(&exec, "--http") {
            assert_eq!(*name, "gateway");
            assert_eq!(http, "127.0.0.1:8080");
            assert!(listening.insert(8080));
        }
        assert_eq!(
            flag(&exec, "--database-url").as_deref(),
            WITH_DATABASE
                .contains(name)
                .then_some("${SLM_DATABASE_URL}"),
            "{name}"
        );
        assert_eq!(one(u, "Install", "WantedBy"), "multi-user.target");
        assert_eq!(one(u, "Service", "StateDirectoryMode"), "0700");
    }
    for (name, u) in &units {
        let env = unit_env(u);
        assert_eq!(env["OTEL_SERVICE_NAME"], format!("slm-{name}"));
        let mut peers = BTreeSet::new();
        for (var, url) in env.iter().filter(|(k, _)| k.ends_with("_URL")) {
            let (host, port) = http_url(url);
            assert_eq!(host, "127.0.0.1");
            let target = SERVICES
                .iter()
                .find(|(_, v)| *v == Some(var.as_str()))
                .unwrap_or_else(|| panic!("{name}: unknown {var}"))
                .0;
            assert_eq!(port, grpc[target], "{name}: {var}");
            // Started after the peers it calls.
            let after = one(u, "Unit", "After");
            assert!(after.contains(&format!("slm-{target}.service")), "{name}");
            peers.insert(target);
        }
        let wanted: BTreeSet<&str> = needs(name).iter().copied().collect();
        assert_eq!(peers, wanted, "{name}: peers");
        // The environment file named by a unit that expands
        // ${SLM_DATABASE_URL} defines it (the example in deploy/systemd/).
        if WITH_DATABASE.contains(name) {
            let file = one(u, "Service", "EnvironmentFile");
            assert!(
                !file.starts_with('-'),
                "{name}: the database URL is required"
            );
            let example = Path::new(file).file_name().unwrap().to_str().unwrap();
            let vars = env_file(&format!("deploy/systemd/{example}"));
            let (host, _) = postgres_host(&vars["SLM_DATABASE_URL"]);
            assert_eq!(host, "127.0.0.1");
        }
    }

    // The receipt service: its own user, state directory and env file.
    let receipt = &units["receipt"];
    let r_user = one(receipt, "Service", "User");
    let r_state = one(receipt, "Service", "StateDirectory");
    let r_data = &unit_env(receipt)["SLM_DATA_DIR"];
    assert_eq!(r_data, &format!("/var/lib/{r_state}"));
    for (name, u) in &units {
        if *name == "receipt" {
            continue;
        }
        assert_ne!(one(u, "Service", "User"), r_user, "{name}");
        let state = one(u, "Service", "StateDirectory");
        assert!(!state.starts_with(r_state), "{name}: {state}");
        assert!(!unit_env(u)["SLM_DATA_DIR"].starts_with(r_data.as_str()));
        for f in u["Service"].get("EnvironmentFile").into_iter().flatten() {
            assert_ne!(f, one(receipt, "Service", "EnvironmentFile"), "{name}");
        }
    }
    let sysusers = read("deploy/systemd/slm.sysusers.conf");
    for user in [r_user, one(&units["ledger"], "Service", "User")] {
        assert!(
            sysusers
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some(user)),
            "{user} not in slm.sysusers.conf"
        );
    }
}

#[test]
fn dockerfile_builds_the_slm_binary_locked() {
    let df = read("deploy/Dockerfile");
    let build_line = df
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("RUN --mount"))
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        build_line.contains("cargo build --release --locked -p slm"),
        "{build_line}"
    );
    let froms: Vec<&str> = df.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "multi-stage: {froms:?}");
    assert!(froms[0].contains("rust:1.95") && froms[0].ends_with("AS build"));
    assert!(df.contains("COPY --from=build /usr/local/bin/slm /usr/local/bin/slm"));
    assert!(df.contains("ENTRYPOINT [\"/usr/local/bin/slm\"]"));
    assert!(df.contains("USER slm"));
    assert!(
        df.lines()
            .any(|l| l.starts_with("EXPOSE") && l.contains("50051"))
    );
    // target/ stays out of the build context.
    let ignore = read("deploy/Dockerfile.dockerignore");
    assert!(ignore.lines().any(|l| l.trim() == "target"));
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Runs a compose healthcheck command (`CMD ...`) with its port replaced.
fn run_check(test: &[String], from: u16, to: u16) -> bool {
    let argv: Vec<String> = test[1..]
        .iter()
        .map(|a| a.replace(&format!("/{from}"), &format!("/{to}")))
        .collect();
    Command::new(&argv[0])
        .args(&argv[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

#[test]
fn compose_healthcheck_command_tells_serving_from_not() {
    let doc = compose();
    let svcs = services(&doc);
    let test = svcs["ledger"].healthcheck_test();
    let port = free_port();
    assert!(!run_check(&test, 50051, port), "nothing listens yet");

    let data = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_slm"))
        .args([
            "serve",
            "--only",
            "ledger",
            "--grpc",
            &format!("127.0.0.1:{port}"),
        ])
        .env("SLM_DATA_DIR", data.path())
        .env_remove("SLM_DATABASE_URL")
        .env_remove("SLM_LEDGER_DATABASE_URL")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "slm serve exited");
        assert!(Instant::now() < deadline, "slm serve never listened");
        std::thread::sleep(Duration::from_millis(50));
    }
    let healthy = run_check(&test, 50051, port);
    let _ = child.kill();
    let _ = child.wait();
    assert!(healthy, "the healthcheck fails on a serving ledger");
}
