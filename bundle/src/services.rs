//! Wiring: a client per service, each either in this process on the data
//! root (embedded) or remote when `SLM_<SERVICE>_URL` names one.

use std::path::PathBuf;

use anyhow::Context;

use slm_ledger::{LedgerService, Store};
use slm_loop_engine::LoopEngineService;
use slm_proto::v1::ledger_client::LedgerClient;
use slm_proto::v1::ledger_server::LedgerServer;
use slm_proto::v1::loop_engine_client::LoopEngineClient;
use slm_proto::v1::loop_engine_server::LoopEngineServer;
use slm_proto::v1::receipt_client::ReceiptClient;
use slm_proto::v1::receipt_server::ReceiptServer;
use slm_receipt::checks::Checks;
use slm_receipt::grpc::ReceiptService;
use slm_runtime::config::peer_url;
use slm_runtime::transport::{in_process, remote};
use slm_runtime::{DataRoot, Transport};

pub const LEDGER_DB: &str = "memory.db";
pub const RECEIPT_DB: &str = "receipt.db";
/// Held by `slm serve` while it runs on a data root.
pub const SERVE_LOCK: &str = "serve.lock";

pub struct Services {
    pub root: DataRoot,
    pub ledger: LedgerClient<Transport>,
    pub loop_engine: LoopEngineClient<Transport>,
    pub receipt: ReceiptClient<Transport>,
    /// The operator credential of the embedded receipt service, when it
    /// runs in this process.
    pub local_operator_token: Option<String>,
    /// Servers run in this process (for `slm serve` to expose).
    pub local_ledger: Option<LedgerServer<LedgerService>>,
    pub local_loop_engine: Option<LoopEngineServer<LoopEngineService>>,
    pub local_receipt: Option<ReceiptServer<ReceiptService>>,
    embedded_store: Option<Store>,
    embedded_receipts: Option<slm_receipt::store::Store>,
}

impl Services {
    pub async fn connect() -> anyhow::Result<Self> {
        let root = DataRoot::from_env()?;
        root.ensure()?;
        let (ledger_transport, local_ledger, embedded_store) = match peer_url("ledger") {
            Some(url) => (
                remote(&url).map_err(|e| anyhow::anyhow!("SLM_LEDGER_URL: {e}"))?,
                None,
                None,
            ),
            None => {
                let url = root.database_url("ledger", LEDGER_DB);
                let store = Store::open(&url).await.with_context(|| {
                    format!("opening the ledger database in {}", root.path().display())
                })?;
                let server = LedgerService::new(store.clone()).into_server();
                (in_process(server.clone()), Some(server), Some(store))
            }
        };
        let ledger = LedgerClient::new(ledger_transport);
        let (receipt_transport, local_receipt, embedded_receipts, local_operator_token) =
            match peer_url("receipt") {
                Some(url) => (
                    remote(&url).map_err(|e| anyhow::anyhow!("SLM_RECEIPT_URL: {e}"))?,
                    None,
                    None,
                    None,
                ),
                None => {
                    let url = root.database_url("receipt", RECEIPT_DB);
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
        let (loop_transport, local_loop_engine) = match peer_url("loop-engine") {
            Some(url) => (
                remote(&url).map_err(|e| anyhow::anyhow!("SLM_LOOP_ENGINE_URL: {e}"))?,
                None,
            ),
            None => {
                let server = LoopEngineService::new(ledger.clone(), Some(root.path()))
                    .with_receipt(receipt.clone())
                    .into_server();
                (in_process(server.clone()), Some(server))
            }
        };
        Ok(Self {
            root,
            ledger,
            loop_engine: LoopEngineClient::new(loop_transport),
            receipt,
            local_operator_token,
            local_ledger,
            local_loop_engine,
            local_receipt,
            embedded_store,
            embedded_receipts,
        })
    }

    /// The embedded databases by file name, for backups. None when any
    /// service is remote: a backup is taken on the host of the data root.
    pub fn embedded_databases(&self) -> Option<Vec<(&'static str, &slm_runtime::Db)>> {
        Some(vec![
            (LEDGER_DB, self.embedded_store.as_ref()?.db()),
            (RECEIPT_DB, self.embedded_receipts.as_ref()?.db()),
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
    }
}
