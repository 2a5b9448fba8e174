//! Shared plumbing of the SLM services: where data lives, how databases are
//! opened and migrated, how services reach their peers (in process or over a
//! socket), and logging.

pub mod change_feed;
pub mod config;
pub mod db;
pub mod events;
pub mod telemetry;
#[cfg(feature = "test-support")]
pub mod testing;
pub mod time;
pub mod trace_context;
pub mod transport;

pub use config::{ConfigError, DataRoot};
pub use db::{Backend, Db, DbError, MigrationSet};
pub use transport::Transport;
