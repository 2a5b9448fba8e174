//! Wiring: a client per service, each either in this process on the data
//! root (embedded) or remote when `SLM_<SERVICE>_URL` names one.

use std::path::PathBuf;

use anyhow::Context;

use slm_ledger::{LedgerService, Store};
use slm_loop_engine::LoopEngineService;
use slm_proto::v1::bridge_client::BridgeClient;
use slm_proto::v1::bridge_server::BridgeServer;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::ledger_server::LedgerServer;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_proto::v1::loop_engine_server::LoopEngineServer;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_proto::v1::receipt_server::ReceiptServer;
use slm_receipt::checks::Checks;
use slm_receipt::grpc::ReceiptService;
use slm_runtime::config::peer_url;
use slm_runtime::transport::{in_process, remote, unavailable};
use slm_runtime::{DataRoot, Transport};

pub const LEDGER_DB: &str = "memory.db";
pub const RECEIPT_DB: &str = "receipt.db";
pub const LEARNING_DB: &str = slm_bridge::LEARNING_DB;
/// Held by `slm serve` while it runs on a data root.
pub const SERVE_LOCK: &str = "serve.lock";

pub struct Services {
    pub root: DataRoot,
    pub ledger: LedgerClient<Transport>,
    pub loop_engine: LoopEngineClient<Transport>,
    pub receipt: ReceiptClient<Transport>,
    pub bridge: BridgeClient<Transport>,
    /// The operator credential of the embedded receipt service, when it
    /// runs in this process.
    pub local_operator_token: Option<String>,
    /// Servers run in this process (for `slm serve` to expose).
    pub local_ledger: Option<LedgerServer<LedgerService>>,
    pub local_loop_engine: Option<LoopEngineServer<LoopEngineService>>,
    pub local_receipt: Option<ReceiptServer<ReceiptService>>,
    pub local_bridge: Option<BridgeServer<slm_bridge::BridgeService>>,
    embedded_store: Option<Store>,
    embedded_receipts: Option<slm_receipt::store::Store>,
    embedded_bridge: Option<slm_bridge::Store>,
}

/// The services `slm serve --only` can run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Ledger,
    Receipt,
    LoopEngine,
    Bridge,
    Gateway,
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "ledger" => Ok(Role::Ledger),
            "receipt" => Ok(Role::Receipt),
            "loop-engine" => Ok(Role::LoopEngine),
            "bridge" => Ok(Role::Bridge),
            "gateway" => Ok(Role::Gateway),
            other => Err(format!(
                "unknown service {other:?}: use ledger, receipt, loop-engine, bridge or gateway"
            )),
        }
    }
}

/// Which services run here and on which database.
#[derive(Debug, Default, Clone)]
pub struct Placement {
    /// None: every service runs in this process.
    pub only: Option<Vec<Role>>,
    /// Overrides the database URL of every service run here.
    pub database_url: Option<String>,
}

/// How one peer is reached.
enum Where {
    Local,
    Remote(String),
    Absent,
}

impl Placement {
    fn runs(&self, role: Role) -> bool {
        self.only.as_ref().is_none_or(|o| o.contains(&role))
    }

    /// A service runs here when asked to; otherwise it is reached at its
    /// `SLM_<SERVICE>_URL`; with `--only` and no URL it is absent.
    fn place(&self, role: Role, service: &str) -> Where {
        if self.only.is_some() && self.runs(role) {
            return Where::Local;
        }
        match peer_url(service) {
            Some(url) => Where::Remote(url),
            None if self.only.is_none() => Where::Local,
            None => Where::Absent,
        }
    }

    fn database_url(&self, root: &DataRoot, service: &str, file: &str) -> String {
        self.database_url
            .clone()
            .unwrap_or_else(|| root.database_url(service, file))
    }
}

fn transport_for(w: &Where, service: &str, var: &str) -> anyhow::Result<Option<Transport>> {
    Ok(match w {
        Where::Local => None,
        Where::Remote(url) => Some(remote(url).map_err(|e| anyhow::anyhow!("{var}: {e}"))?),
        Where::Absent => Some(unavailable(format!(
            "the {service} service does not run in this process; set {var} to reach it"
        ))),
    })
}

impl Services {
    /// Every service in this process, or remote where `SLM_*_URL` says so.
    pub async fn connect() -> anyhow::Result<Self> {
        Self::connect_with(&Placement::default()).await
    }

    pub async fn connect_with(p: &Placement) -> anyhow::Result<Self> {
        let root = DataRoot::from_env()?;
        root.ensure()?;
        let ledger_at = p.place(Role::Ledger, "ledger");
        let (ledger_transport, local_ledger, embedded_store) =
            match transport_for(&ledger_at, "ledger", "SLM_LEDGER_URL")? {
                Some(t) => (t, None, None),
                None => {
                    let url = p.database_url(&root, "ledger", LEDGER_DB);
                    let store = Store::open(&url).await.with_context(|| {
                        format!("opening the ledger database in {}", root.path().display())
                    })?;
                    let server = LedgerService::new(store.clone()).into_server();
                    (in_process(server.clone()), Some(server), Some(store))
                }
            };
        let ledger = LedgerClient::new(ledger_transport);
        let receipt_at = p.place(Role::Receipt, "receipt");
        let (receipt_transport, local_receipt, embedded_receipts, local_operator_token) =
            match transport_for(&receipt_at, "receipt", "SLM_RECEIPT_URL")? {
                Some(t) => (t, None, None, None),
                None => {
                    let url = p.database_url(&root, "receipt", RECEIPT_DB);
                    let store = slm_receipt::store::Store::open(&url)
                        .await
                        .with_context(|| {
                            format!("opening the receipt database in {}", root.path().display())
                        })?;
                    let token = slm_receipt::fsys::keys::operator_token(root.path(), true)
                        .map_err(|e| anyhow::anyhow!("operator credential: {e}"))?;
                    let server =
                        ReceiptService::new(Checks::new(store.clone(), root.path()), token.clone())
                            .into_server();
                    (
                        in_process(server.clone()),
                        Some(server),
                        Some(store),
                        Some(token),
                    )
                }
            };
        let receipt = ReceiptClient::new(receipt_transport);
        let loop_at = p.place(Role::LoopEngine, "loop-engine");
        let (loop_transport, local_loop_engine) =
            match transport_for(&loop_at, "loop-engine", "SLM_LOOP_ENGINE_URL")? {
                Some(t) => (t, None),
                None => {
                    let server = LoopEngineService::new(ledger.clone(), Some(root.path()))
                        .with_receipt(receipt.clone())
                        .into_server();
                    (in_process(server.clone()), Some(server))
                }
            };
        let bridge_at = p.place(Role::Bridge, "bridge");
        let (bridge_transport, local_bridge, embedded_bridge) =
            match transport_for(&bridge_at, "bridge", "SLM_BRIDGE_URL")? {
                Some(t) => (t, None, None),
                None => {
                    let url = p.database_url(&root, "bridge", LEARNING_DB);
                    let store = slm_bridge::Store::open(&url).await.with_context(|| {
                        format!("opening the learning database in {}", root.path().display())
                    })?;
                    let server =
                        slm_bridge::BridgeService::new(slm_bridge::Bridge::new(store.clone()))
                            .into_server();
                    (in_process(server.clone()), Some(server), Some(store))
                }
            };
        Ok(Self {
            root,
            ledger,
            loop_engine: LoopEngineClient::new(loop_transport),
            receipt,
            bridge: BridgeClient::new(bridge_transport),
            local_operator_token,
            local_ledger,
            local_loop_engine,
            local_receipt,
            local_bridge,
            embedded_store,
            embedded_receipts,
            embedded_bridge,
        })
    }

    /// Whether a service here keeps its data in an SQLite file of the data
    /// root (then one `slm serve` at a time may hold it).
    pub fn uses_sqlite(&self) -> bool {
        let sqlite = |db: &slm_runtime::Db| db.backend == slm_runtime::Backend::Sqlite;
        self.embedded_store.as_ref().is_some_and(|s| sqlite(s.db()))
            || self
                .embedded_receipts
                .as_ref()
                .is_some_and(|s| sqlite(s.db()))
    }

    /// The embedded databases by file name, for backups. None when any
    /// service is remote: a backup is taken on the host of the data root.
    pub fn embedded_databases(&self) -> Option<Vec<(&'static str, &slm_runtime::Db)>> {
        Some(vec![
            (LEDGER_DB, self.embedded_store.as_ref()?.db()),
            (RECEIPT_DB, self.embedded_receipts.as_ref()?.db()),
            (LEARNING_DB, self.embedded_bridge.as_ref()?.db()),
        ])
    }

    pub fn lock_path(&self) -> PathBuf {
        self.root.join(SERVE_LOCK)
    }

    /// Closes embedded databases cleanly (checkpoints the WAL).
    pub async fn close(self) {
        if let Some(store) = self.embedded_store {
            store.close().await;
        }
        if let Some(store) = self.embedded_receipts {
            store.close().await;
        }
        if let Some(store) = self.embedded_bridge {
            store.close().await;
        }
    }
}
