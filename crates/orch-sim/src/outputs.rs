//! The trainers' output as data: `outputs/` holds every message and traceback the simulator
//! prints on failure, written as the real log reads it (frame paths included), with `{name}`
//! where a pid, an actor id, a time stamp or a number goes. The files are embedded with
//! `include_str!` and filled in here, so the wording can be read (and checked against the real
//! trainers' source and logs) as text.
//!
//! # Theory of operation
//!
//! `outputs/*.txt` are single messages (torch's OOM, vLLM's and SGLang's start-up errors, Ray's
//! memory monitor) that [`render`] fills in place. `outputs/<trainer>/*.txt` are
//! whole failure outputs, one per failure kind (and torch elastic's launch banner; `rl_swarm/` too), and `outputs/frames/*.txt` the traceback frames
//! from a training step down to a failing allocation, one file per allocation site
//! (each trainer's `site_frames`, beside its whole outputs in its module under `trainers/`). [`Vars::lines`] renders a whole output into
//! the lines a runner writes: a line holding a *block* placeholder (a frames file, or another
//! rendered output) is repeated once per line of the block with the text around the placeholder
//! kept, so `[rank0]: {site_frames}` prefixes every frame; any other placeholder is filled in
//! place, so a multi-line value such as Ray's message stays one write, as Ray prints it.

/// torch's caching-allocator OOM (`c10/cuda/CUDACachingAllocator.cpp`), without the class.
pub const TORCH_OOM: &str = include_str!("../outputs/torch_oom.txt");
/// vLLM `check_enough_kv_cache_memory`, no blocks at all.
pub const VLLM_NO_CACHE_BLOCKS: &str = include_str!("../outputs/vllm_no_cache_blocks.txt");
/// vLLM V1 `check_enough_kv_cache_memory`, KV cache below one max-length request.
pub const VLLM_MAX_LEN: &str = include_str!("../outputs/vllm_max_len.txt");
/// vLLM `gpu_worker.py` start-up check.
pub const VLLM_FREE_MEMORY: &str = include_str!("../outputs/vllm_free_memory.txt");
/// SGLang `init_memory_pool`.
pub const SGLANG_NOT_ENOUGH: &str = include_str!("../outputs/sglang_not_enough.txt");
/// Ray's memory-monitor kill message (`ray.exceptions.OutOfMemoryError`).
pub const RAY_HOST_OOM: &str = include_str!("../outputs/ray_host_oom.txt");
/// torch elastic's `ChildFailedError` summary when a rank died (`torchrun`'s own exit).
pub const TORCH_ELASTIC_FAILED: &str = include_str!("../outputs/torch_elastic_failed.txt");

/// Fill `{name}` placeholders from `vars` in one pass (values are never scanned again). A
/// brace not followed by a known name and `}` is text, like the `{}` real logs print.
pub fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 64);
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let value = after.find('}').and_then(|close| {
            let name = &after[..close];
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (close, *v))
        });
        match value {
            Some((close, v)) => {
                out.push_str(v);
                rest = &after[close + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The values for one whole-output template: inline values and line blocks (see the module
/// docs for how each is filled).
#[derive(Debug, Clone, Default)]
pub struct Vars {
    values: Vec<(&'static str, String)>,
    blocks: Vec<(&'static str, String)>,
}

impl Vars {
    /// No values yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// `{name}` is `value`, in place (a multi-line value stays within its line's write).
    pub fn set(mut self, name: &'static str, value: impl ToString) -> Self {
        self.values.push((name, value.to_string()));
        self
    }

    /// A line holding `{name}` is repeated once per line of `text` (none when it is empty).
    pub fn block(mut self, name: &'static str, text: impl Into<String>) -> Self {
        self.blocks.push((name, text.into()));
        self
    }

    /// The lines of `template` filled in, one per write.
    pub fn lines(&self, template: &str) -> Vec<String> {
        let vars: Vec<(&str, &str)> = self.values.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let mut out = Vec::new();
        for line in template.lines() {
            let block = self.blocks.iter().find_map(|(name, text)| {
                let placeholder = format!("{{{name}}}");
                line.find(&placeholder)
                    .map(|at| (at, at + placeholder.len(), text))
            });
            match block {
                Some((start, end, text)) => {
                    let before = render(&line[..start], &vars);
                    let after = render(&line[end..], &vars);
                    out.extend(text.lines().map(|l| format!("{before}{l}{after}")));
                }
                None => out.push(render(line, &vars)),
            }
        }
        out
    }

    /// [`Vars::lines`] joined with newlines (to use as another template's block).
    pub fn text(&self, template: &str) -> String {
        self.lines(template).join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_fill_once_and_other_braces_stay() {
        assert_eq!(
            render("a {x} b {} c {y}{x}", &[("x", "{y}"), ("y", "2")]),
            "a {y} b {} c 2{y}"
        );
    }

    #[test]
    fn blocks_repeat_their_line_and_values_stay_in_theirs() {
        let vars = Vars::new()
            .set("pid", 7)
            .set("msg", "two\nlines")
            .block("frames", "  f1\n  f2\n")
            .block("none", "");
        assert_eq!(
            vars.lines("[{pid}]: {frames} ({pid})\n{none}\nError: {msg}\n\nend {}\n"),
            vec![
                "[7]:   f1 (7)",
                "[7]:   f2 (7)",
                "Error: two\nlines",
                "",
                "end {}"
            ]
        );
    }
}
