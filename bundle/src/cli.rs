//! The command line, as clap types.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

pub const EXIT_HELP: &str = "\
Exit status:
  0  success (for `slm loop demo`: the run ended DONE)
  1  error (bad input, unreachable service, storage failure)
  2  usage error
  3  loop ended HALT (a safety bound tripped)
  4  loop ended PAUSE (awaiting approval)
  5  loop ended KILLED (kill switch)
  6  loop ended ERROR (the runner or the gate failed)

Environment:
  SLM_DATA_DIR        data root (default $XDG_DATA_HOME/slm or ~/.local/share/slm)
  SLM_PROFILE         memory profile to use (default: default; or --profile-id)
  SLM_MCP_PROFILE     MCP tool profile for `slm mcp` and `slm serve --http`
  SLM_LEDGER_URL      use a remote ledger service (gRPC URL) instead of the data root
  SLM_LOOP_ENGINE_URL use a remote loop-engine service
  SLM_LOOP_KILL       any non-empty value trips the kill switch of loops run here";

#[derive(Parser, Debug)]
#[command(
    name = "slm",
    version,
    about = "Local agent memory with bounded loops: an agent loop ends only when an independent check passes.",
    after_help = EXIT_HELP
)]
pub struct Cli {
    /// Memory profile to read and write (default: default).
    #[arg(
        long = "profile-id",
        global = true,
        env = "SLM_PROFILE",
        default_value = ""
    )]
    pub profile: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Store a memory.
    Remember(RememberArgs),
    /// Find memories by full-text recall.
    Recall(RecallArgs),
    /// Bounded loops: the keyless demo, history, one run, the kill switch.
    #[command(subcommand, after_help = EXIT_HELP)]
    Loop(LoopCommand),
    /// Operator-registered checks: register, run, gate status, list. Needs the
    /// operator credential (SLM_OPERATOR_TOKEN_FILE or SLM_OPERATOR_TOKEN, or
    /// the data root's own when working on it directly).
    #[command(subcommand, after_help = CHECK_HELP)]
    Check(CheckCommand),
    /// Profiles: list, create, delete (with every memory they hold).
    #[command(subcommand)]
    Profile(ProfileCommand),
    /// Write a consistent copy of the data root's databases into DEST (a new
    /// directory), even while `slm serve` runs.
    Backup {
        dest: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Replace the data root's databases with a backup made by `slm backup`.
    /// Refused while `slm serve` runs on the data root; the replaced files
    /// are kept beside the new ones as `*.pre-restore-<time>`.
    Restore {
        src: PathBuf,
        #[arg(long)]
        json: bool,
    },
    /// Run every service in this process on the data root and serve gRPC
    /// (and MCP over streamable HTTP at /mcp with --http).
    Serve(ServeArgs),
    /// Measure this machine: per-lap engine overhead, checks, gate, register,
    /// DONE after a receipt, recall at 100k memories, the bridge and 1,000
    /// waiting watchers (temporary data; the data root is not touched).
    Bench {
        /// Fewer samples and 200 watchers: under 5 minutes on 2 cores.
        #[arg(long)]
        quick: bool,
        /// Print the figures as one JSON object.
        #[arg(long)]
        json: bool,
        /// Only these areas: engine, receipt, watch, recall, bridge, watchers.
        #[arg(long, value_delimiter = ',', value_name = "AREA[,AREA]")]
        only: Vec<String>,
        /// Also measure recall on PostgreSQL, in a throwaway database made
        /// (and dropped) on the server of this URL.
        #[arg(long, value_name = "URL")]
        postgres: Option<String>,
    },
    /// Serve MCP over stdio for an agent host (Claude Code, Codex, Cursor…).
    Mcp {
        /// Tool profile: code, full, power or whole (default: SLM_MCP_PROFILE,
        /// else full).
        #[arg(long)]
        profile: Option<String>,
    },
}

#[derive(Args, Debug)]
pub struct RememberArgs {
    pub text: String,
    #[arg(long = "tag")]
    pub tags: Vec<String>,
    #[arg(long, default_value = "")]
    pub session: String,
    /// 1 (least) to 10; default 5.
    #[arg(long, default_value_t = 0)]
    pub importance: i32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub struct RecallArgs {
    pub query: String,
    #[arg(long, default_value = "")]
    pub tag: String,
    #[arg(long, default_value_t = 10)]
    pub limit: u32,
    #[arg(long)]
    pub json: bool,
}

#[derive(Subcommand, Debug)]
pub enum LoopCommand {
    /// Run the keyless convergence demo (stub runner; the gate passes on lap 3).
    Demo {
        /// Iteration cap (0 means 10).
        #[arg(long, default_value_t = 10, allow_negative_numbers = true)]
        iterations: i64,
        #[arg(long)]
        json: bool,
    },
    /// Recorded runs of a loop, newest first.
    History {
        #[arg(long, default_value = "convergence-demo")]
        name: String,
        /// At most this many runs (default: all).
        #[arg(long)]
        limit: Option<u32>,
        #[arg(long)]
        json: bool,
    },
    /// Every lap of one run.
    Show {
        run_id: String,
        #[arg(long)]
        json: bool,
    },
    /// Trip the kill switch of running loops (all, or one with --run); it
    /// stays tripped until `--clear`.
    Kill {
        #[arg(long)]
        run: Option<String>,
        #[arg(long)]
        clear: bool,
        #[arg(long)]
        json: bool,
    },
}

pub const CHECK_HELP: &str = "\
Exit status: 0 PASS / gate passed, 3 FAIL receipt / gate refused, 1 refused or error.

Example:
  slm check register --task build --watcher build --producer operator-checker \\
      --cwd ~/proj --check tests pytest.ini --artifact 'src/**/*.py' -- python3 -m pytest tests
  slm check run <job_id>
  slm check status <job_id> --watcher build";

#[derive(Subcommand, Debug)]
pub enum CheckCommand {
    /// Pin a check: copies the check files into the content-addressed store
    /// and records the command, the working folder and the artifacts the
    /// agent may change. Prints the job id the watcher's gate_contract needs.
    Register {
        #[arg(long)]
        task: String,
        /// The loop name whose watcher this job serves.
        #[arg(long)]
        watcher: String,
        /// Who produces receipts; must differ from the running agent.
        #[arg(long)]
        producer: String,
        /// The approved project folder (default: the current folder).
        #[arg(long)]
        cwd: Option<PathBuf>,
        /// Check files to pin (paths or globs inside --cwd).
        #[arg(long = "check", num_args = 1.., value_name = "PATH")]
        check: Vec<String>,
        /// Mutable artifacts the agent may change (paths or globs).
        #[arg(long = "artifact", num_args = 1.., value_name = "GLOB")]
        artifact: Vec<String>,
        /// Lifetime in seconds (1..86400; default 3600).
        #[arg(long, default_value_t = 3600, allow_negative_numbers = true)]
        ttl: i64,
        /// Accept receipts produced before a watcher started.
        #[arg(long)]
        allow_prestart_evidence: bool,
        #[arg(long)]
        json: bool,
        /// The command, as an argument vector (no shell).
        #[arg(last = true, required = true, value_name = "ARGV")]
        argv: Vec<String>,
    },
    /// Run a registered check on copied inputs, contained, and store a
    /// signed receipt (exit status and hashes, never the output).
    Run {
        job_id: String,
        /// Seconds (0.1..60; default 30).
        #[arg(long, default_value_t = 30.0)]
        timeout: f64,
        #[arg(long)]
        json: bool,
    },
    /// What the receipt gate says for a job and watcher now.
    Status {
        job_id: String,
        #[arg(long)]
        watcher: String,
        /// The running agent's identity (default: SLM_AGENT_ID or mcp_client).
        #[arg(long)]
        agent: Option<String>,
        /// Watcher start time (ISO-8601); default: accept receipts since
        /// registration.
        #[arg(long)]
        since: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// Registered jobs with their latest receipt.
    List {
        #[arg(long, default_value_t = 50)]
        limit: u32,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand, Debug)]
pub enum ProfileCommand {
    List {
        #[arg(long)]
        json: bool,
    },
    Create {
        name: String,
        #[arg(long)]
        json: bool,
    },
    Delete {
        name: String,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// gRPC listen address.
    #[arg(long, default_value = "127.0.0.1:50151")]
    pub grpc: std::net::SocketAddr,
    /// Also serve MCP over streamable HTTP at http://ADDR/mcp.
    #[arg(long)]
    pub http: Option<std::net::SocketAddr>,
    /// Run only these services (comma-separated: ledger, receipt,
    /// loop-engine, bridge, gateway); peers are reached at SLM_LEDGER_URL,
    /// SLM_RECEIPT_URL, SLM_LOOP_ENGINE_URL, SLM_BRIDGE_URL.
    #[arg(long, value_name = "SERVICE[,SERVICE]")]
    pub only: Option<String>,
    /// Database of the services run here (e.g. postgres://user@host/db).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
}

impl Command {
    /// Whether errors should be printed as JSON.
    pub fn json(&self) -> bool {
        match self {
            Command::Remember(a) => a.json,
            Command::Recall(a) => a.json,
            Command::Loop(
                LoopCommand::Demo { json, .. }
                | LoopCommand::History { json, .. }
                | LoopCommand::Show { json, .. }
                | LoopCommand::Kill { json, .. },
            ) => *json,
            Command::Check(
                CheckCommand::Register { json, .. }
                | CheckCommand::Run { json, .. }
                | CheckCommand::Status { json, .. }
                | CheckCommand::List { json, .. },
            ) => *json,
            Command::Profile(
                ProfileCommand::List { json }
                | ProfileCommand::Create { json, .. }
                | ProfileCommand::Delete { json, .. },
            ) => *json,
            Command::Backup { json, .. } | Command::Restore { json, .. } => *json,
            Command::Bench { json, .. } => *json,
            Command::Serve(_) | Command::Mcp { .. } => false,
        }
    }
}
