//! The SLM bounded loop engine service.
//!
//! - [`domain`]: the engine itself (lap order, bounds, statuses), pure;
//! - [`kill`], [`ledger`], [`demo`], [`watch`]: the ports the service plugs into it;
//! - [`grpc`]: the `slm.v1.LoopEngine` server.

pub mod demo;
pub mod domain;
pub mod grpc;
pub mod kill;
pub mod ledger;
pub mod watch;

pub use grpc::LoopEngineService;
