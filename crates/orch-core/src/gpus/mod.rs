//! One machine's GPUs: what `nvidia-smi` reports ([`inventory`]) and how a watcher shares them
//! and `--max-parallel` places among its runs' jobs ([`slots`]).

pub mod inventory;
pub mod slots;

pub use inventory::{Gpu, Inventory};
pub use slots::{Grant, Slots, Waiting};
