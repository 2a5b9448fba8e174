//! Pure rules of the receipt service: exact refusal strings, canonical
//! digests, selectors, command normalisation, jobs, signed evidence and the
//! ordered receipt gate.

pub mod canon;
pub mod command;
pub mod evidence;
pub mod gate;
pub mod job;
pub mod msg;
pub mod selectors;
