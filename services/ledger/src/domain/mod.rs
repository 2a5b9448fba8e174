//! Pure rules of the memory service: what a valid memory is, how recall
//! scores, and how a loop lap is written and read as memory.

pub mod entry;
pub mod memory;
pub mod recall;

pub use entry::LapRecord;
pub use memory::{LedgerError, NewMemory, StoredMemory};
