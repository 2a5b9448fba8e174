//! The memory (ledger) service: durable, profile-scoped memories with full
//! text recall, and the loop ledger (every lap of a bounded loop is a memory).
//!
//! - [`domain`]: validation, recall scoring, the lap record format;
//! - [`store`]: the tables on SQLite or PostgreSQL;
//! - [`grpc`]: the `slm.v1.Ledger` server.

pub mod domain;
pub mod grpc;
pub mod store;

pub use grpc::LedgerService;
pub use store::Store;
