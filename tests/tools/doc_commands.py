#!/usr/bin/env python3
"""Every clattn tool command line that README.md and docs/*.md show is accepted by the tool.

Each command line found in the documents (code blocks, and inline code that is more than a
bare tool name) is run with --check-args right after the tool's name: the tool checks its
arguments as a run would (names, ranges, combinations, --param names) and exits 0 before
any device work; a synopsis or a line with placeholders (`[--x]`, `<op>`, `N`, `NAME=V`,
`...`) is skipped and listed. The README's synopses are covered by SYNOPSIS_INSTANCES below,
one concrete command per option they show. RUN lines are run for real (small, PoCL).

    doc_commands.py SOURCE_DIR TOOL=PATH...
"""
import glob
import os
import re
import shlex
import subprocess
import sys

TOOLS = ("clattn-bench", "clattn-probe", "clattn-serve-sim", "clattn-tune", "clattn-kernel-report")

# The README's tool synopses (its "Tools" section), instantiated.
SYNOPSIS_INSTANCES = [
    "clattn-probe --json --bench --self-check --device 0",
    "clattn-serve-sim --model llama-8b --layers 2 --backend paged --requests 4 --max-running 2 --kv-dtype fp8 --big",
    "clattn-serve-sim --model qwen3-next --layers 4",
    "clattn-serve-sim --model deepseek-v3-tp8 --kv-dtype fp8_e4m3",
    "clattn-serve-sim --model gpt-oss --kv-dtype f16",
    "clattn-serve-sim --model tiny --backend paged_table --no-mixed --no-warmup",
    "clattn-serve-sim --model llama-8b-hsa --layers 4",
    "clattn-serve-sim --model llama-8b --hsa-topk 64 --hsa-window 512 --hsa-strategy head --hsa-layers 0,2 --hsa-no-fuse",
    "clattn-bench --device 0 --reps 1 decode --quick",
    "clattn-bench extend --quick",
    "clattn-bench mla --quick",
    "clattn-bench linear --quick",
    "clattn-bench metadata --quick",
    "clattn-bench limits --quick",
    "clattn-bench --sgemm-n 512 extend --quick",
    "clattn-bench sparse --quick",
    "clattn-bench sparse --dsa --quick --mla-param WGS_PER_CU=4",
    "clattn-bench sparse -B 8 -S 8192 --topk 32 --window 256 --strategy head",
    "clattn-bench decode --param UNROLL=2 --grid UNROLL=2,4;QREGS=64,128",
    "clattn-bench decode -B 2 -S 64 -H 8",
    "clattn-bench decode -B 2 -S 64 -H 8 --hkv 2 -D 64 --page 16 --kv e4m3 --layout hnd --meta table",
    "clattn-bench mla --param QB=8 --grid LANES=8,16",
    "clattn-bench mla -B 2 -S 64 -H 16",
    "clattn-bench extend --param WG=64 -B 1 --qo 16 --kv 32 -H 4 --scatter-pages",
    "clattn-bench linear --quick --dtype f32 --only decode -B 2 -L 0 -H 4 --dk 64 --dv 64 --param DEC_VEC=2",
    "clattn-kernel-report --check -t dg2 -t gfx90a --op decode --op extend --options --json report.json",
    "clattn-tune --ops decode,merge --time-budget 5 --out tuned.json --quick --emit-rows",
]

# Run for real: the README shows them, and each is small on PoCL.
RUN = [
    "clattn-bench --iters 3 --warmup 1 metadata --quick --no-device",
    "clattn-bench --iters 3 --warmup 1 limits --quick",
]


def fragments(text):
    """Command-line candidates: each line of a code block (continuations joined), and each
    inline code span of the prose."""
    out, block, fence = [], [], False
    prose = []
    for line in text.split("\n"):
        if line.strip().startswith("```"):
            fence = not fence
            continue
        if fence or line.startswith("    "):
            block.append(line)
            continue
        prose.append(line)
        if block:
            out += re.sub(r"\\\n\s*", " ", "\n".join(block)).split("\n")
            block = []
    if block:
        out += re.sub(r"\\\n\s*", " ", "\n".join(block)).split("\n")
    for m in re.finditer(r"`([^`]+)`", "\n".join(prose)):
        span = m.group(1).replace("\n", " ").strip()
        if os.path.basename(span) not in TOOLS:  # a bare name is a mention, not a command
            out.append(span)
    return out


def placeholder(tok):
    return (any(c in tok for c in "[]<>") or ".." in tok or re.fullmatch(r"[A-Z]", tok) is not None
            or re.fullmatch(r"[A-Z_]+=[A-Z]+", tok) is not None or (tok.startswith("$") and "/" not in tok))


def commands(text):
    """(tool, args, the line's text) of each command line in `text`; args is None for a
    synopsis or a line with placeholders."""
    pat = re.compile(r"(?:^|[\s/])(" + "|".join(TOOLS) + r")(?=\s|$)")
    for frag in fragments(text):
        for m in pat.finditer(frag):
            lex = shlex.shlex(frag[m.end():], posix=True, punctuation_chars=True)
            lex.whitespace_split = True
            args = []
            for tok in lex:
                if tok and all(c in "|&;()<>" for c in tok):  # the shell takes over: pipe, &&, ;, >
                    if tok.startswith(">") and args and args[-1].isdigit():
                        args.pop()  # the 2 of 2>&1
                    break
                args.append(tok)
            ends_in_value_option = bool(args) and args[-1] in ("--param", "--grid", "--ops", "--op", "-t")
            angle = re.search(r"<\w+>", re.split(r"\||&&|;|#", frag[m.end():])[0])  # `<op>`: shlex splits it
            synopsis = any(placeholder(a) for a in args) or ends_in_value_option or angle
            yield m.group(1), None if synopsis else args, frag[m.end():].strip()


def run(exe, args, real):
    cmd = [exe] + args if real else [exe, "--check-args"] + args
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600 if real else 30)
    except subprocess.TimeoutExpired:
        return "timed out"
    if p.returncode != 0:
        return f"exit {p.returncode}: {(p.stderr + p.stdout).strip()[-600:]}"
    return None


def main(argv):
    src, exes = argv[1], dict(a.split("=", 1) for a in argv[2:])
    docs = [os.path.join(src, "README.md")] + sorted(glob.glob(os.path.join(src, "docs", "*.md")))
    failures, checked, skipped = [], 0, []
    work = []
    for path in docs:
        with open(path, encoding="utf-8") as f:
            for tool, args, text in commands(f.read()):
                if args is None:
                    skipped.append(f"{os.path.relpath(path, src)}: {tool} {text} (synopsis or placeholders)")
                else:
                    work.append((os.path.relpath(path, src), tool, args, False))
    for line in SYNOPSIS_INSTANCES:
        tool, *args = shlex.split(line)
        work.append(("README synopsis", tool, args, False))
    for line in RUN:
        tool, *args = shlex.split(line)
        work.append(("run", tool, args, True))
    for where, tool, args, real in work:
        if tool not in exes:
            skipped.append(f"{where}: {tool} (not built)")
            continue
        why = run(exes[tool], args, real)
        checked += 1
        line = f"{where}: {tool} {shlex.join(args)}"
        print(("FAIL " if why else "ok   ") + line + (f"\n       {why}" if why else ""))
        if why:
            failures.append(line)
    for s in skipped:
        print("skip " + s)
    print(f"{checked} command lines checked, {len(failures)} failed, {len(skipped)} skipped")
    return 1 if failures or checked == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
