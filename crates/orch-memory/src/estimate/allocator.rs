//! torch's caching allocator, replayed: a trainer's allocations in order, against a GPU's
//! capacity, with fragmentation slack and any blocks the trainer says are stranded; the first
//! allocation that does not fit is the OOM, with the numbers torch's message reports.

/// Where a tensor is allocated; picks the traceback the report prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Site {
    /// Model parameters (loaded back to the GPU, or created).
    Params,
    /// The reference model's parameters.
    RefParams,
    /// Gradients, in the backward.
    Grads,
    /// Optimizer state (AdamW's `exp_avg` / `exp_avg_sq`).
    Optim,
    /// FSDP's all-gathered layer parameters.
    Gather,
    /// Stored activations in the forward.
    Activations,
    /// A checkpointed layer recomputed in the backward.
    Recompute,
    /// The bf16 `lm_head` output.
    LogitsBf16,
    /// The logits upcast to fp32.
    LogitsFp32,
    /// The fp32 softmax / log-softmax over the vocabulary.
    Softmax,
    /// Attention scores (eager attention in user scripts).
    Attention,
    /// Everything resident before the step (a fitted constant).
    Static,
}

/// One allocation (or free) in the order the trainer makes it.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// `gib` in total, in tensors of `chunk_gib` each.
    Alloc {
        /// Where (picks the traceback).
        site: Site,
        /// What, for the breakdown.
        label: String,
        /// Total size.
        gib: f64,
        /// Size of each tensor.
        chunk_gib: f64,
    },
    /// `gib` freed (back to the allocator's reserve, not the device).
    Free {
        /// Size freed.
        gib: f64,
    },
    /// `gib` of cached memory stranded: a freed block that smaller tensors were split out of,
    /// so it stays reserved but can no longer hold a tensor of its old size. The next
    /// allocation that does not fit in the rest of the reserve reserves fresh memory on top.
    Strand {
        /// Size of the stranded block.
        gib: f64,
    },
}

impl Event {
    /// This event with its label prefixed by `phase` (`old-log-prob pass (…): logits bf16`):
    /// an OOM in a phase of a step names the phase.
    pub(crate) fn in_phase(self, phase: &str) -> Event {
        match self {
            Event::Alloc {
                site,
                label,
                gib,
                chunk_gib,
            } => alloc(site, format!("{phase}: {label}"), gib, chunk_gib),
            other => other,
        }
    }
}

/// What `events` leave allocated: their allocations less their frees (GiB).
pub(crate) fn net_gib(events: &[Event]) -> f64 {
    events
        .iter()
        .map(|e| match e {
            Event::Alloc { gib, .. } => *gib,
            Event::Free { gib } => -*gib,
            _ => 0.0,
        })
        .sum()
}

pub(crate) fn alloc(site: Site, label: impl Into<String>, gib: f64, chunk_gib: f64) -> Event {
    Event::Alloc {
        site,
        label: label.into(),
        gib,
        chunk_gib,
    }
}

/// A CUDA OOM as torch's caching allocator would report it.
#[derive(Debug, Clone, PartialEq)]
pub struct OomDetail {
    /// Where the failing tensor is allocated.
    pub site: Site,
    /// What it is.
    pub label: String,
    /// "Tried to allocate".
    pub tried_gib: f64,
    /// "GPU 0 has a total capacity of".
    pub capacity_gib: f64,
    /// "of which … is free".
    pub free_gib: f64,
    /// `torch.cuda.memory_allocated()` of the failing process.
    pub allocated_gib: f64,
    /// Reserved by the caching allocator but not allocated.
    pub reserved_unallocated_gib: f64,
    /// The failing process's total (PyTorch + non-PyTorch).
    pub process_gib: f64,
    /// Other processes on the same GPU (e.g. the SGLang server), GiB each.
    pub other_processes_gib: Vec<f64>,
}

/// Result of replaying an allocation sequence against a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Walk {
    /// Peak `memory_allocated` of the process.
    pub allocated_peak_gib: f64,
    /// Peak `memory_reserved` of the process.
    pub reserved_peak_gib: f64,
    /// Peak of everything on the device (other processes + non-PyTorch + reserved).
    pub device_peak_gib: f64,
    /// The first allocation that did not fit, if any.
    pub oom: Option<OomDetail>,
}

/// The most tensors one [`Event::Alloc`] is replayed as.
const MAX_CHUNKS: f64 = 4096.0;

/// Replay `events` on a GPU of `capacity` GiB that already holds `others` (other processes)
/// and `nontorch` (this process, outside the caching allocator).
///
/// Allocator model: a new tensor either fits in memory the allocator already reserved, or it
/// needs fresh device memory for itself while everything allocated so far stays reserved with
/// a `frag` share of slack (fragmentation), plus whatever [`Event::Strand`] left stranded. The
/// allocation fails when the device would exceed its capacity.
pub fn walk(capacity: f64, others: &[f64], nontorch: f64, frag: f64, events: &[Event]) -> Walk {
    let others_sum: f64 = others.iter().sum();
    let base = others_sum + nontorch;
    let (mut a, mut r, mut a_peak) = (0.0f64, 0.0f64, 0.0f64);
    let mut stranded = 0.0f64;
    for ev in events {
        match ev {
            Event::Free { gib } => a = (a - gib).max(0.0),
            Event::Strand { gib } => stranded += gib.max(0.0),
            Event::Alloc {
                site,
                label,
                gib,
                chunk_gib,
            } => {
                if *gib <= 0.0 {
                    continue;
                }
                // At most MAX_CHUNKS tensors per event: a real trainer's events have tens,
                // and an absurd setting (a 1e30 batch) must not spin here.
                let chunk = chunk_gib.max(gib / MAX_CHUNKS).max(1e-6).min(*gib);
                let mut remaining = *gib;
                while remaining > 1e-12 {
                    let c = remaining.min(chunk);
                    remaining -= c;
                    let floor = a * (1.0 + frag) + stranded + c;
                    let need_r = if r >= floor { r } else { floor };
                    if base + need_r > capacity + 1e-9 {
                        let mut free = (capacity - base - r).max(0.0);
                        if free >= c {
                            free = c * 0.5;
                        }
                        let process = capacity - others_sum - free;
                        return Walk {
                            allocated_peak_gib: a_peak,
                            reserved_peak_gib: r,
                            device_peak_gib: base + r,
                            oom: Some(OomDetail {
                                site: *site,
                                label: label.clone(),
                                tried_gib: c,
                                capacity_gib: capacity,
                                free_gib: free,
                                allocated_gib: a,
                                reserved_unallocated_gib: (r - a).max(0.0),
                                process_gib: process,
                                other_processes_gib: others.to_vec(),
                            }),
                        };
                    }
                    r = need_r;
                    a += c;
                    a_peak = a_peak.max(a);
                }
            }
        }
    }
    Walk {
        allocated_peak_gib: a_peak,
        reserved_peak_gib: r,
        device_peak_gib: base + r,
        oom: None,
    }
}
