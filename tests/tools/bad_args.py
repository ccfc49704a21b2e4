#!/usr/bin/env python3
"""Every clattn tool refuses a bad argument with exit 2 and a message naming it, never a
crash, an abort or a runaway (each case has a short timeout); the probe reports a broken
environment (no OpenCL driver, CLATTN_DEVICE matching nothing, a CLATTN_LOG_LEVEL that is no
level); and a few small real runs check what clattn-serve-sim reports (tokens generated, the
shared prefix of a preset whose page is longer than the system prompt, the cold pass kept
out of the figures, the errno of the cache-directory warning), and clattn-bench rope's one-case
form with a cos/sin cache runs.

    bad_args.py TOOL=PATH...
"""
import os
import shlex
import subprocess
import sys
import tempfile

# (tool, arguments, environment, exit code, text the output must hold)
BAD = [
    ("clattn-serve-sim", "--layers -1", {}, 2, "--layers: must be at least 0"),
    ("clattn-serve-sim", "--kv-dtype int2", {}, 2, "--kv-dtype: must be one of"),
    ("clattn-serve-sim", "--kv-scale-dtype bf16", {}, 2, "--kv-scale-dtype: must be one of f32 f16"),
    ("clattn-serve-sim", "--compare-kv int2", {}, 2, "--compare-kv: must be one of"),
    ("clattn-serve-sim", "--kv-dtype int4 --quant-group 48", {}, 2, "--quant-group"),
    ("clattn-serve-sim", "--model deepseek-v3-tp8 --kv-dtype int4", {}, 2,
     "--kv-dtype: int4: model deepseek-v3-tp8 has MLA layers"),
    ("clattn-serve-sim", "--model deepseek-v3-tp8 --compare-kv int4", {}, 2, "--compare-kv: int4: model deepseek-v3-tp8"),
    ("clattn-serve-sim", "--model llama-8b-hsa --kv-dtype int8", {}, 2, "--kv-dtype: int8: HSA's page selection"),
    ("clattn-serve-sim", "--dtype int4", {}, 2, "--dtype: must be one of f32 f16 bf16"),
    ("clattn-serve-sim", "--dtype fp8", {}, 2, "--dtype"),
    ("clattn-serve-sim", "--prompt-min 50 --prompt-max 10", {}, 2, "--prompt-max: is 10, below --prompt-min 50"),
    ("clattn-serve-sim", "--big --prompt-max 10", {}, 2, "--prompt-max"),
    ("clattn-serve-sim", "--output-min 5 --output-max 2", {}, 2, "--output-max"),
    ("clattn-serve-sim", "--max-running 0", {}, 2, "--max-running: must be at least 1"),
    ("clattn-serve-sim", "--requests 0", {}, 2, "--requests: must be at least 1"),
    ("clattn-serve-sim", "--model nope", {}, 2, "--model"),
    ("clattn-serve-sim", "--backend nope", {}, 2, "--backend"),
    ("clattn-serve-sim", "--prefill-backend nope", {}, 2, "--prefill-backend"),
    ("clattn-serve-sim", "--decode-backend nope", {}, 2, "--decode-backend"),
    ("clattn-serve-sim", "--page-size -4", {}, 2, "--page-size"),
    ("clattn-serve-sim", "--system-prompt -1", {}, 2, "--system-prompt"),
    ("clattn-serve-sim", "--prompt-min 0", {}, 2, "--prompt-min"),
    ("clattn-serve-sim", "--output-min 0", {}, 2, "--output-min"),
    ("clattn-serve-sim", "--prefill-budget 0", {}, 2, "--prefill-budget"),
    ("clattn-serve-sim", "--pages -1", {}, 2, "--pages"),
    ("clattn-serve-sim", "--model tiny --pages 2", {}, 2, "--pages: 2 cannot hold the longest request"),
    ("clattn-serve-sim", "--check-every -1", {}, 2, "--check-every"),
    ("clattn-serve-sim", "--check-requests 0", {}, 2, "--check-requests"),
    ("clattn-serve-sim", "--layers x", {}, 2, "--layers"),
    ("clattn-serve-sim", "--bogus", {}, 2, "--bogus"),
    ("clattn-serve-sim", "--hsa-topk 0", {}, 2, "--hsa-topk: must be at least 1"),
    ("clattn-serve-sim", "--hsa-topk 4 --hsa-window -1", {}, 2, "--hsa-window: must be at least 0"),
    ("clattn-serve-sim", "--hsa-topk 4 --hsa-strategy row", {}, 2, "--hsa-strategy: must be one of"),
    ("clattn-serve-sim", "--hsa-topk 4 --hsa-layers 0,x", {}, 2, "--hsa-layers"),
    ("clattn-serve-sim", "--model tiny --hsa-window 8", {}, 2, "--hsa-window: needs --hsa-topk (model tiny runs no HSA)"),
    ("clattn-serve-sim", "--model tiny --hsa-no-fuse", {}, 2, "--hsa-no-fuse: needs --hsa-topk"),
    ("clattn-serve-sim", "--model tiny --hsa-topk 2 --hsa-layers 5", {}, 2, "--hsa-layers: 5 is not a layer of model tiny (layers 0..1)"),
    ("clattn-serve-sim", "--model tiny --hsa-topk 2 --hsa-layers 0,0", {}, 2, "--hsa-layers: lists layer 0 twice"),
    ("clattn-serve-sim", "--model gpt-oss --layers 4 --hsa-topk 2 --hsa-layers 0", {}, 2,
     "--hsa-layers: layer 0 of gpt-oss is a sliding-window layer"),
    ("clattn-serve-sim", "--model qwen3-next --hsa-topk 2 --hsa-layers 0", {}, 2, "--hsa-layers: layer 0 of qwen3-next is a linear layer"),
    ("clattn-serve-sim", "--model deepseek-v3-tp8 --hsa-topk 2", {}, 2,
     "--hsa-topk: model deepseek-v3-tp8 has no full-attention MHA layer"),
    ("clattn-serve-sim", "--model llama-8b-hsa --page-size 1", {}, 2, "--page-size: is 1: HSA needs at least 2"),
    ("clattn-serve-sim", "--model llama-8b-hsa --backend paged", {}, 2, "--backend: is paged: with HSA, model llama-8b-hsa runs on hsa"),
    ("clattn-serve-sim", "--backend hsa", {}, 2, "--backend: hsa needs --hsa-topk"),
    ("clattn-serve-sim", "--model qwen3-next --hsa-topk 2 --decode-backend paged_table", {}, 2, "--decode-backend: is paged_table"),
    ("clattn-serve-sim", "--model qwen3-next --prefill-backend hsa", {}, 2, "--prefill-backend: is hsa: HSA runs in decode steps only"),
    ("clattn-bench", "bogus", {}, 2, "unknown op 'bogus'"),
    ("clattn-bench", "", {}, 2, "an op is required"),
    ("clattn-bench", "rope -T 0", {}, 2, "-T"),
    ("clattn-bench", "rope --kv int2", {}, 2, "--kv"),
    ("clattn-bench", "rope --kv int4 -T 5 -D 96 --quant-group 64", {}, 2, "--quant-group: 64 does not divide"),
    ("clattn-bench", "rope -T 5 -D 7", {}, 2, "--dim"),
    ("clattn-bench", "rope -T 5 --rotary-dim 300", {}, 2, "--rotary-dim"),
    ("clattn-bench", "sparse --page 1", {}, 2, "--page"),
    ("clattn-bench", "sparse --topk 0", {}, 2, "--topk"),
    ("clattn-bench", "sparse --window -1", {}, 2, "--window"),
    ("clattn-bench", "sparse --strategy nope", {}, 2, "--strategy"),
    ("clattn-bench", "sparse --hkv 5", {}, 2, "--hkv"),
    ("clattn-bench", "sparse --mla-param NOPE=1", {}, 2, "NOPE"),
    ("clattn-bench", "decode bogus", {}, 2, "bogus"),
    ("clattn-bench", "--bogus decode", {}, 2, "--bogus"),
    ("clattn-bench", "--reps 0 limits", {}, 2, "--reps"),
    ("clattn-bench", "--iters 0 limits", {}, 2, "--iters"),
    ("clattn-bench", "--warmup -1 limits", {}, 2, "--warmup"),
    ("clattn-bench", "--sgemm-n 0 limits", {}, 2, "--sgemm-n"),
    ("clattn-bench", "decode --param NOPE=3", {}, 2, "decode has no parameter 'NOPE' (its parameters: "),
    ("clattn-bench", "decode --param WG=x", {}, 2, "'x' is not an integer"),
    ("clattn-bench", "decode --param WG", {}, 2, "--param wants NAME=VALUE"),
    ("clattn-bench", "decode --grid UNROLL=", {}, 2, "has no values"),
    ("clattn-bench", "decode --grid UNROLL=2,4;NOPE=1", {}, 2, "no parameter 'NOPE'"),
    ("clattn-bench", "decode -B 0", {}, 2, "--batch"),
    ("clattn-bench", "decode -S -1", {}, 2, "--seq"),
    ("clattn-bench", "decode -H 0", {}, 2, "--hq"),
    ("clattn-bench", "decode --hkv 0", {}, 2, "--hkv"),
    ("clattn-bench", "decode -D 0", {}, 2, "--dim"),
    ("clattn-bench", "decode --page 0", {}, 2, "--page"),
    ("clattn-bench", "decode -H 4 --hkv 3", {}, 2, "--hkv: 3 does not divide the query heads (4)"),
    ("clattn-bench", "decode --kv int2", {}, 2, "--kv"),
    ("clattn-bench", "decode --kv int4 --quant-group 48", {}, 2, "--quant-group"),
    ("clattn-bench", "decode --kv int4 -D 96 --quant-group 64", {}, 2, "--quant-group: 64 does not divide the head dim (96)"),
    ("clattn-bench", "decode --q e4m3", {}, 2, "--q"),
    ("clattn-bench", "decode --layout xyz", {}, 2, "--layout"),
    ("clattn-bench", "decode --meta xyz", {}, 2, "--meta"),
    ("clattn-bench", "decode --max-splits -1", {}, 2, "--max-splits"),
    ("clattn-bench", "extend -B 1", {}, 2, "-B requires --qo"),
    ("clattn-bench", "extend --qo 4", {}, 2, "--qo requires -B"),
    ("clattn-bench", "extend -B 1 --qo 8 --kv 4", {}, 2, "--kv: 4 is below --qo 8"),
    ("clattn-bench", "extend -B 1 --qo 0", {}, 2, "--qo"),
    ("clattn-bench", "extend --variant nope", {}, 2, "--variant"),
    ("clattn-bench", "extend --param NOPE=1", {}, 2, "extend has no parameter 'NOPE'"),
    ("clattn-bench", "mla -S 64", {}, 2, "-S requires -B"),
    ("clattn-bench", "mla -B 0", {}, 2, "-B"),
    ("clattn-bench", "mla -B 1 --kv int4", {}, 2, "--kv"),
    ("clattn-bench", "mla --variant nope", {}, 2, "--variant"),
    ("clattn-bench", "mla --param NOPE=1", {}, 2, "mla_decode has no parameter 'NOPE'"),
    ("clattn-bench", "mla --grid NOPE=1", {}, 2, "no parameter 'NOPE'"),
    ("clattn-bench", "linear --dtype fp8", {}, 2, "--dtype"),
    ("clattn-bench", "linear --only both", {}, 2, "--only"),
    ("clattn-bench", "linear -L 4", {}, 2, "-L requires -B"),
    ("clattn-bench", "linear -B 0", {}, 2, "-B"),
    ("clattn-bench", "linear --param NOPE=1", {}, 2, "has no parameter 'NOPE'"),
    ("clattn-bench", "metadata --page-sizes 0", {}, 2, "--page-sizes"),
    ("clattn-bench", "metadata --batches 1,x", {}, 2, "--batches"),
    ("clattn-bench", "metadata --max-reps 0", {}, 2, "--max-reps"),
    ("clattn-bench", "limits --mib 0", {}, 2, "--mib"),
    ("clattn-probe", "--bogus", {}, 2, "--bogus"),
    ("clattn-probe", "--device no-such-device-xyz", {}, 2, "available devices"),
    ("clattn-probe", "", {"CLATTN_DEVICE": "no-such-device-xyz"}, 2, "CLATTN_DEVICE='no-such-device-xyz' matches no device"),
    ("clattn-tune", "--ops nope", {}, 2, "unknown op 'nope'"),
    ("clattn-tune", "--ops decode,nope", {}, 2, "unknown op 'nope'"),
    ("clattn-tune", "--time-budget -1", {}, 2, "--time-budget"),
    ("clattn-tune", "--warmup -1", {}, 2, "--warmup"),
    ("clattn-tune", "--iters 0", {}, 2, "--iters"),
    ("clattn-tune", "--passes 0", {}, 2, "--passes"),
    ("clattn-tune", "--from /nonexistent/tuned.json", {}, 2, "--from"),
    ("clattn-kernel-report", "-t nope", {}, 2, "--target: must be one of"),
    ("clattn-kernel-report", "-t dg2 --op nope", {}, 2, "--op: unknown op 'nope'"),
    ("clattn-kernel-report", "-j 0", {}, 2, "--jobs"),
]


def run(exe, args, env, timeout):
    e = dict(os.environ)
    e.update(env)
    try:
        p = subprocess.run([exe] + args, capture_output=True, text=True, timeout=timeout, env=e)
    except subprocess.TimeoutExpired:
        return None, "", ""
    return p.returncode, p.stdout, p.stderr


class Checker:
    def __init__(self):
        self.failures = 0

    def expect(self, ok, what, detail=""):
        print(("ok   " if ok else "FAIL ") + what + ("" if ok else "\n       " + detail.strip()[-1500:].replace("\n", "\n       ")))
        self.failures += not ok


def main(argv):
    exes = dict(a.split("=", 1) for a in argv[1:])
    c = Checker()

    for tool, line, env, want_rc, want in BAD:
        if tool not in exes:
            continue
        rc, out, err = run(exes[tool], shlex.split(line), env, 30)
        what = " ".join(f"{k}={v}" for k, v in env.items()) + (" " if env else "") + f"{tool} {line}"
        if rc is None:
            c.expect(False, what, "timed out after 30 s")
            continue
        text = out + err
        c.expect(rc == want_rc and want in text and "terminate called" not in text,
                 f"{what} -> exit {rc}", f"want exit {want_rc} and '{want}' in:\n{text}")

    if "clattn-probe" in exes:
        probe = exes["clattn-probe"]
        with tempfile.TemporaryDirectory() as empty:  # an ICD loader with no driver
            for vendors in ("/nonexistent", empty):
                rc, out, err = run(probe, [], {"OCL_ICD_VENDORS": vendors}, 60)
                c.expect(rc == 1 and "no OpenCL platform found" in err and "apt-get install pocl-opencl-icd" in err,
                         f"OCL_ICD_VENDORS={vendors} clattn-probe -> exit {rc}", out + err)
        rc, out, err = run(probe, [], {"CLATTN_LOG_LEVEL": "loud"}, 60)
        c.expect(rc == 0 and "CLATTN_LOG_LEVEL='loud' is not a level (one of: trace debug info warn error critical off)" in err,
                 f"CLATTN_LOG_LEVEL=loud clattn-probe -> exit {rc}", out + err)

    if "clattn-serve-sim" in exes:
        sim = exes["clattn-serve-sim"]
        tiny = ["--model", "tiny", "--layers", "1", "--no-progress", "--check-every", "0"]
        # Every request generates exactly its output length; the system prompt generates nothing.
        rc, out, err = run(sim, tiny + ["--no-warmup", "--requests", "3", "--output-min", "2", "--output-max", "2"], {}, 300)
        c.expect(rc == 0 and ", 6 generated" in out, "serve-sim: 3 requests x 2 tokens report 6 generated", out + err)
        # A pool just large enough for the longest request serves every request, one at a time.
        rc, out, err = run(sim, tiny + ["--no-warmup", "--requests", "6", "--pages", "21"], {}, 300)
        c.expect(rc == 0 and " of 21 pages)" in out and "\nOK" in out, "serve-sim tiny --pages 21 (the longest request's 84 tokens)",
                 out + err)
        # The cold pass is reported on its own and kept out of the figures.
        rc, out, err = run(sim, tiny + ["--requests", "2"], {}, 300)
        lines = out.splitlines()
        cold = [i for i, l in enumerate(lines) if l.strip().startswith("cold pass")]
        model = [i for i, l in enumerate(lines) if l.strip().startswith("model")]
        c.expect(rc == 0 and cold and model and cold[0] < model[0] and "one-time cost" in out and "(warm pass;" in out,
                 "serve-sim: a cold pass first, its one-time cost on its own line, figures from the warm pass", out + err)
        # A page (64) longer than the system prompt (32): one whole page is shared, and said so.
        rc, out, err = run(sim, ["--model", "deepseek-v3-tp8", "--layers", "1", "--requests", "2", "--no-progress",
                                 "--no-warmup", "--check-every", "0"], {}, 600)
        c.expect(rc == 0 and "shared prefix  64 tokens = 1 page(s) of 64 (--system-prompt 32 rounded up" in out
                 and "(128 served from the shared prefix)" in out,
                 "serve-sim deepseek-v3-tp8: the 32-token system prompt shares one 64-token page", out + err)
        # The cache-directory warning carries the errno of the failed call, not the logger's.
        rc, out, err = run(sim, tiny + ["--no-warmup", "--requests", "1"], {"CLATTN_CACHE_DIR": "/dev/null/clattn"}, 300)
        c.expect(rc == 0 and "/dev/null (Not a directory); disk cache off" in err and "Inappropriate ioctl" not in err,
                 "serve-sim with CLATTN_CACHE_DIR under /dev/null: the warning says 'Not a directory'", out + err)

    if "clattn-bench" in exes:
        # The one-case form with a cos/sin cache and the full head dim rotated (--rotary-dim 0).
        rc, out, err = run(exes["clattn-bench"], shlex.split("--iters 1 rope -T 4 --hq 2 --hkv 1 -D 64 --kv int8 --cos-sin-cache"),
                           {}, 300)
        c.expect(rc == 0 and "cos_sin_cache fused" in out and "cos_sin_cache two kernels" in out,
                 "clattn-bench rope -T 4 -D 64 --kv int8 --cos-sin-cache: both rows", out + err)

    print(f"{c.failures} failed")
    return 1 if c.failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
