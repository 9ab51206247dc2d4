#!/usr/bin/env python3
"""What Hugging Face's sparse-MoE blocks keep per token, measured on the CPU (no GPU needed).

For one block (`qwen3`: Qwen3MoeSparseMoeBlock, `mixtral`, `qwen2`: with a shared expert) of a
small shape, in bf16: the bytes autograd saves for the backward (saved-tensor hooks, parameters
left out), and the peak of live tensors in a no-grad forward (a dispatch-mode tracker). These
are the counts behind orch's MoE constants (`MOE_SAVED_BYTES_BF16`, `MOE_NOGRAD_BYTES` in
crates/orch-memory/src/estimate/k.rs); the output of one run is
crates/orch-memory/calibration/measured/moe-saved-bytes-cpu.txt.

    pip install torch==2.8.0 transformers==4.57.1   # the 4.5x releases verl's CI pins
    python3 scripts/moe-saved-bytes.py qwen3   # also: mixtral, qwen2
"""
import sys, weakref, torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
torch.manual_seed(0)
h, I, E, k, T, Is = 256, 128, 16, 4, 2048, 512

def saved_bytes(block, x):
    seen = {}
    def pack(t):
        s = t.untyped_storage()
        key = s.data_ptr()
        if not isinstance(t, torch.nn.Parameter) and t.requires_grad is not None:
            seen[key] = (s.nbytes(), t.dtype, tuple(t.shape))
        return t
    params = {p.untyped_storage().data_ptr() for p in block.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = block(x)
    out = out[0] if isinstance(out, tuple) else out
    inp = x.untyped_storage().data_ptr()
    d = {kk: v for kk, v in seen.items() if kk not in params}
    tot = sum(v[0] for v in d.values())
    return tot, d, inp

class LiveTracker(TorchDispatchMode):
    def __init__(self):
        super().__init__(); self.live = {}; self.cur = 0; self.peak = 0
    def _track(self, t):
        if not isinstance(t, torch.Tensor): return
        s = t.untyped_storage(); key = s.data_ptr()
        if key == 0: return
        if key not in self.live:
            self.live[key] = [s.nbytes(), 0]; self.cur += s.nbytes(); self.peak = max(self.peak, self.cur)
        self.live[key][1] += 1
        def fin(key=key):
            e = self.live.get(key)
            if e is None: return
            e[1] -= 1
            if e[1] == 0:
                self.cur -= e[0]; del self.live[key]
        weakref.finalize(t, fin)
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tree_map(self._track, out)
        return out

def run(name, block, nograd_only=False):
    block = block.to(torch.bfloat16)
    x = torch.randn(1, T, h, dtype=torch.bfloat16, requires_grad=True)
    block.train()
    tot, d, inp = saved_bytes(block, x)
    in_saved = d.get(inp, (0,))[0]
    print(f"== {name}: saved-for-backward bytes/token = {tot/T:.1f} (of which block input {in_saved/T:.1f})")
    for kk, v in sorted(d.items(), key=lambda kv: -kv[1][0]):
        print(f"   {v[0]/T:9.1f} B/tok  {str(v[1]):15s} {v[2]}")
    block.eval()
    with torch.no_grad():
        xb = x.detach().clone()
        m = LiveTracker()
        with m:
            y = block(xb)
        print(f"   no_grad live peak (excl. input, params) bytes/token = {m.peak/T:.1f}")

cfgmod = sys.argv[1]
if cfgmod == "qwen3":
    from transformers.models.qwen3_moe.configuration_qwen3_moe import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock
    c = Qwen3MoeConfig(hidden_size=h, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=k, norm_topk_prob=True)
    for impl in (["eager", "grouped_mm"] if hasattr(c, "_experts_implementation") else [None]):
        if impl: c._experts_implementation = impl
        run(f"Qwen3MoeSparseMoeBlock {impl or ''}", Qwen3MoeSparseMoeBlock(c))
elif cfgmod == "mixtral":
    from transformers.models.mixtral.configuration_mixtral import MixtralConfig
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    c = MixtralConfig(hidden_size=h, intermediate_size=I, num_local_experts=E, num_experts_per_tok=k)
    run("MixtralSparseMoeBlock", MixtralSparseMoeBlock(c))
elif cfgmod == "qwen2":
    from transformers.models.qwen2_moe.configuration_qwen2_moe import Qwen2MoeConfig
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock
    c = Qwen2MoeConfig(hidden_size=h, moe_intermediate_size=I, num_experts=E, num_experts_per_tok=k, shared_expert_intermediate_size=Is)
    run("Qwen2MoeSparseMoeBlock", Qwen2MoeSparseMoeBlock(c))
print(f"dims h={h} I={I} E={E} k={k} T={T} Is={Is}")
