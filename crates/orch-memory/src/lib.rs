//! How much memory a training configuration needs, before it runs.
//!
//! Every failed attempt on a cluster costs a queue wait; knowing the memory a configuration
//! needs on a card lets orch submit one that fits. This crate holds the parts of that
//! knowledge that know nothing of orch's runs:
//!
//! - [`Architecture`]: a decoder-only transformer's shape, in Hugging Face `config.json`
//!   terms (`hidden_size`, `num_hidden_layers`, …), and what follows from it (parameter
//!   count, KV-cache bytes per token).
//! - [`ModelTable`]: common model families shipped as data (`models/*.yaml` at the
//!   repository's top level, embedded; a user adds a family by writing one).
//! - [`datasets`]: how long a dataset's prompts and responses really are (`datasets/*.yaml`,
//!   embedded, each with the logs its figures come from): what a padding-free micro-batch holds.
//! - [`resolve`]: an experiment's architecture from, in order, its `architecture:` mapping or
//!   path, a local model directory, the local Hugging Face cache, or the table. Never the
//!   network: when none of them knows, it says so and orch recovers from evidence alone.
//! - [`estimate`]: the memory model — per-GPU breakdown (model states, activations, logits,
//!   allocator slack, rollout engine, KV cache), host memory and the first failure a
//!   configuration would hit, per trainer (verl, AReaL, torchrun). The simulated trainer
//!   decides fit or OOM with it, so the simulator and the planner share one model.
//! - [`overrides`]: a trainer's configuration as flat dotted keys, what [`estimate`] reads.
//! - [`shape`]: an [`Architecture`] reduced to what memory depends on (with a stand-in shape
//!   for the simulator when a model is unknown).
//! - [`input`]: bounded input, for orch's every reader of configuration: only regular files,
//!   at most `MAX_CONFIG_BYTES`, and YAML whose aliases stay within a budget when expanded.

mod arch;
pub mod calibration;
pub mod datasets;
pub mod estimate;
pub mod input;
pub mod overrides;
mod resolve;
pub mod shape;
mod table;

pub use arch::{ArchError, Architecture};
pub use resolve::{ArchSource, ArchSpec, Lookup, Resolved, expand_home, hf_cache_dirs, resolve};
pub use table::{ModelTable, TableError, params_from_name};
