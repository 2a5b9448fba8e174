//! The filesystem side of the receipt service: no-follow handles below a
//! canonical root, declared-input selection, hashing and copying, the private
//! check store and the admission key.

pub mod keys;
pub mod scratch;
pub mod select;
pub mod stamp;
pub mod tree;
