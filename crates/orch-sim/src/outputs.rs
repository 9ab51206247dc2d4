//! The trainers' canned messages as data: `outputs/*.txt` hold the text of torch's OOM, vLLM's
//! and SGLang's start-up errors and Ray's memory monitor as the real logs print them, with
//! `{name}` where a number or id goes. They are embedded with `include_str!` and filled in by
//! [`render`], so the wording can be read (and checked against the real source) as text.

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
}
