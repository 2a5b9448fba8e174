//! The receipt service: operator-registered checks, contained hermetic runs,
//! signed execution receipts and the receipt gate.

pub mod checks;
pub mod domain;
pub mod exec;
pub mod fsys;
pub mod grpc;
pub mod store;
