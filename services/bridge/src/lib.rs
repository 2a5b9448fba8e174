//! The read-only bridge to the separate "Bounded Loops" graph product
//! (spec section 5).
//!
//! - [`domain`]: contract ids, refusal texts, canonical JSON, v1/v2 validation;
//! - [`discovery`]: `PATH` lookup of `bounded-loops-mcp` and trust checks;
//! - [`client`]: the bounded MCP exchange with the producer (rmcp);
//! - [`reply`]: how a producer's reply is read (text, evidence, listing), pure;
//! - [`bridge`]: the two observations and the status probe;
//! - [`store`]: `learning.db` tables (M040 tombstone, M041, M050) on SQLite
//!   or PostgreSQL;
//! - [`grpc`]: the `slm.v1.Bridge` server.

pub mod bridge;
pub mod client;
pub mod discovery;
pub mod domain;
pub mod grpc;
pub mod reply;
pub mod store;

pub use bridge::{Bridge, Outcome};
pub use grpc::BridgeService;
pub use store::Store;

/// The learning database's file name in the data root.
pub const LEARNING_DB: &str = "learning.db";
