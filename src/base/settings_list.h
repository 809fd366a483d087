/* The one settings registry: every CLI flag and DEEPINFER_* variable is declared here, once.
 * DI_SETTING(field, TYPE, "--flag", "ENV_VAR", "default", "one-line doc")
 * TYPE is STR, INT, BOOL or FLOAT. A NULL flag or env means the setting has no such spelling.
 * `0` means off. docs/SETTINGS.md is generated from this list (`deepinfer settings --markdown`). */
DI_SETTING(model_dir, STR, "--model", "DEEPINFER_HF_MODEL_DIR", "",
           "HF checkpoint directory (config.json, safetensors shards, tokenizer.json)")
DI_SETTING(demo_model_dir, STR, "--demo-model-dir", "DEEPINFER_DEMO_MODEL_DIR", "",
           "where the generated demo model is cached (default: $XDG_CACHE_HOME/deepinfer/demo-v1 or "
           "~/.cache/deepinfer/demo-v1)")
DI_SETTING(threads, INT, "--threads", "DEEPINFER_NUM_THREADS", "0",
           "CPU worker threads; 0 = one per core. Results do not depend on it")
DI_SETTING(backend, STR, "--backend", NULL, "auto",
           "compute backend: cpu | cuda | auto (cuda when the build has it and a GPU is present)")
DI_SETTING(accelerator, STR, NULL, "DEEPINFER_ACCELERATOR", "",
           "DeepInfer's backend knob: cpu | nvidia (= --backend cuda); --backend wins")
DI_SETTING(batch_invariant, BOOL, NULL, "DEEPINFER_BATCH_INVARIANT", "0",
           "bit-identical logits whatever the batch: fixed-order kernels for every GEMM (the CPU always is)")
DI_SETTING(gpu_exact, BOOL, NULL, "DEEPINFER_GPU_EXACT", "0",
           "GPU: the exactness-first path -- GEMMs and sparse attention with the CPU's exact sums on CUDA cores and "
           "MoE routing on the host (the fixture's tensors bit-identical to the CPU backend; several times slower) "
           "instead of tensor cores and device routing")
DI_SETTING(gpu_wgmma, BOOL, NULL, "DEEPINFER_GPU_WGMMA", "1",
           "GPU: FP8 / FP4 GEMMs of more than 16 rows a group on bf16 wgmma (cuda_linear_wgmma.cu: exactly "
           "dequantised operands summed over K in fp32, within the CPU bound but not the bits of the decode-sized "
           "kernels) -- a 4,096-token prefill 1.35 s against 1.73 s on the mma.sync tiles (docs/PERFORMANCE.md, "
           "session 9); 0 keeps the mma.sync tiles, whose sums equal the decode-sized kernels'. Not used with "
           "DEEPINFER_BATCH_INVARIANT=1 or DEEPINFER_GPU_EXACT=1")
DI_SETTING(gpu_blas_prefill, BOOL, NULL, "DEEPINFER_GPU_BLAS_PREFILL", "1",
           "GPU: dense FP8 linears of at least 1,024 rows (prefill chunks) on cuBLAS's BF16 GEMM over the weight "
           "dequantised to bf16 once a call, instead of the wgmma kernel (cuda_linear_blas.cu: the same exact "
           "products summed in fp32 in cuBLAS's order, within the same CPU bound); 0 keeps the wgmma kernel. Not used "
           "where the wgmma kernel is not (DEEPINFER_GPU_WGMMA=0, DEEPINFER_BATCH_INVARIANT=1, DEEPINFER_GPU_EXACT=1)")
DI_SETTING(gpu_dense_bf16, INT, NULL, "DEEPINFER_GPU_DENSE_BF16", "0",
           "GPU: > 0 keeps every dense FP8 matrix (attention wq_a, wkv, wq_b, wo_a, wo_b; the shared expert's w1, w3, "
           "w2) also dequantised to bf16 on the device -- 13.0 GB more for V4.1-Flash's 40 layers -- and runs "
           "their calls of at least this many rows on cuBLAS's BF16 GEMM over the copies, in CUDA graphs too, "
           "instead of the wgmma kernel (the same exact products summed in fp32 in cuBLAS's order); matrices that "
           "do not fit stay as they are. H100, 128 (session 53): a B = 256 step 55.3 -> 52.0 ms, B = 128 and a "
           "512-token prefill even or slightly faster, B = 64 below the rows. 0: no copies. Not used "
           "where the wgmma kernel is not (DEEPINFER_GPU_WGMMA=0, DEEPINFER_BATCH_INVARIANT=1, DEEPINFER_GPU_EXACT=1)")
DI_SETTING(enforce_eager, BOOL, "--enforce-eager", "DEEPINFER_ENFORCE_EAGER", "0",
           "GPU: launch every kernel directly instead of running forward calls of up to 256 rows (decode steps) "
           "as CUDA graphs (captured in pieces of 2 layers, kept per topology and updated in place)")
DI_SETTING(gpu_pdl, BOOL, NULL, "DEEPINFER_GPU_PDL", "1",
           "GPU: the kernel-to-kernel edges of the captured graphs programmatic (programmatic dependent launch: a "
           "kernel is launched as its predecessor's blocks exit and waits for its memory in griddepcontrol.wait; "
           "the same results bit for bit, B = 1 -2.4% a step on an H100); 0 keeps plain edges")
DI_SETTING(host_sampling, BOOL, "--host-sampling", "DEEPINFER_HOST_SAMPLING", "0",
           "GPU: sample every row on the host's threads from its logits (517 KB a row over PCIe at V4.1's "
           "vocabulary) instead of on the device where they are -- the same tokens and logprobs bit for bit; "
           "for checking one against the other")
DI_SETTING(enable_mtp_varlen, BOOL, NULL, "DEEPINFER_ENABLE_MTP_VARLEN", "0",
           "DeepInfer knob: variable-length DSpark verification (not implemented yet: warns and is ignored)")
DI_SETTING(use_nextn_decode, BOOL, NULL, "DEEPINFER_USE_NEXTN_DECODE", "0",
           "DeepInfer knob: DSpark speculative decoding (not implemented yet: warns and is ignored)")
DI_SETTING(yoco_prefill_keep_tokens, INT, NULL, "DEEPINFER_YOCO_PREFILL_KEEP_TOKENS", "0",
           "decoder SWA bounded replay window; DeepInfer uses 140 (not implemented yet: the exact prefill runs, with a warning)")
DI_SETTING(ids, STR, "--ids", NULL, "", "logits: comma-separated token ids")
DI_SETTING(prefill, INT, "--prefill", NULL, "-1", "logits: ids run as one prefill (-1 = all)")
DI_SETTING(replay_topk, STR, "--replay-topk", NULL, "",
           "logits: FILE:TENSOR of forced indexer selections [n_index_sources, n_ids, topk] I32")
DI_SETTING(out, STR, "--out", NULL, "", "output file (stdout if empty)")
DI_SETTING(tokenizer, STR, "--tokenizer", NULL, "", "tokenizer.json path")
DI_SETTING(special, BOOL, "--special", NULL, "0", "tokenize: match added/special tokens in the text")
DI_SETTING(jsonl, BOOL, "--jsonl", NULL, "0",
           "tokenize/render/detokenize: one input per stdin line, one result per output line")
DI_SETTING(skip_special, BOOL, "--skip-special", NULL, "0",
           "detokenize: drop tokens flagged special (BOS, EOS, ...) as HF skip_special_tokens")
DI_SETTING(input, STR, "--input", NULL, "", "generate: JSONL file of requests, one per line (- = stdin)")
DI_SETTING(output, STR, "--output", NULL, "", "generate: JSONL file of results (stdout if empty or -)")
DI_SETTING(prompt, STR, "--prompt", NULL, "", "generate: one text prompt (also -p), streamed to stdout")
DI_SETTING(chat, BOOL, "--chat", NULL, "0",
           "generate -p: send the prompt as one user message through the chat template")
DI_SETTING(max_tokens, INT, "--max-tokens", NULL, "0",
           "generate: tokens to generate at most (0 = the engine default, 16); default of JSONL lines")
DI_SETTING(temperature, FLOAT, "--temperature", NULL, "1",
           "generate: sampling temperature (0 = greedy); default of JSONL lines")
DI_SETTING(top_p, FLOAT, "--top-p", NULL, "1", "generate: nucleus sampling mass (1 = off); default of JSONL lines")
DI_SETTING(top_k, INT, "--top-k", NULL, "0", "generate: keep the k most likely tokens (0 = off); default of JSONL lines")
DI_SETTING(seed, INT, "--seed", NULL, "0",
           "generate: engine seed (requests without a seed derive theirs from it and their id); -p: the seed")
DI_SETTING(kv_budget, STR, "--kv-budget", NULL, "0",
           "engine: bytes for per-sequence state (KV, rings), suffix K/M/G allowed (0 = 1G)")
DI_SETTING(max_num_seqs, INT, "--max-num-seqs", NULL, "0", "engine: sequences running at once (0 = 64)")
DI_SETTING(max_batch_tokens, INT, "--max-batch-tokens", NULL, "0",
           "engine: tokens per step, decode + prefill chunks (0 = 2048)")
DI_SETTING(max_prefill_chunk, INT, "--max-prefill-chunk", NULL, "0",
           "engine: prefill tokens of one sequence per step (0 = max-batch-tokens)")
DI_SETTING(xdg_cache_home, STR, NULL, "XDG_CACHE_HOME", "",
           "standard variable: the demo model is cached under it (deepinfer/demo-v1) when absolute")
DI_SETTING(home, STR, NULL, "HOME", "", "standard variable: ~/.cache/deepinfer/demo-v1 holds the demo model otherwise")
DI_SETTING(ep_ranks, INT, "--ep-ranks", NULL, "8",
           "bench on a GPU: the expert-parallel deployment one GPU stands in for (384/N experts resident)")
DI_SETTING(quick, BOOL, "--quick", NULL, "0", "bench on a GPU: fewer steps, quicker ceilings")
DI_SETTING(bench_max_context, INT, "--bench-max-context", NULL, "131072",
           "bench on a GPU: decode rows up to this context (4096, 32768, 131072)")
DI_SETTING(bench_min_context, INT, "--bench-min-context", NULL, "4096",
           "bench on a GPU: decode rows from this context (the first that runs gets the eager-launch and "
           "stage-profile rows and the profiler range)")
DI_SETTING(bench_max_prefill, INT, "--bench-max-prefill", NULL, "16384",
           "bench on a GPU: prefill rows up to this many new tokens (512, 4096, 16384)")
DI_SETTING(bench_batch, STR, "--bench-batch", NULL, "",
           "bench on a GPU: decode rows of these batch sizes only, comma-separated (e.g. 1,64; each 1..256; "
           "empty or 0 = all of 1, 8, 32, 64, 128, 256)")
DI_SETTING(bench_logits, BOOL, "--bench-logits", NULL, "0",
           "bench on a GPU: copy every sequence's logits to the host each step, as for sampled requests "
           "(default: only the greedy tokens, taken on the device)")
DI_SETTING(bench_sampled, BOOL, "--bench-sampled", NULL, "0",
           "bench on a GPU: draw every sequence's token on the device at temperature 1, top_p 0.95 (sampled "
           "requests; the host samples nothing); --bench-logits overrides it")
DI_SETTING(bench_edited, BOOL, "--bench-edited", NULL, "0",
           "bench on a GPU: draw every sequence's token on the device after a mask of about half the vocabulary, a "
           "logit bias and penalties (structured-output requests; the host samples nothing); --bench-logits "
           "overrides it")
DI_SETTING(bench_logprobs, INT, "--bench-logprobs", NULL, "0",
           "bench on a GPU: as --bench-edited, and every sequence also asks for its N best raw logprobs (1..20), "
           "computed on the device (~170 bytes a sequence cross PCIe); --bench-logits overrides it")
DI_SETTING(markdown, BOOL, "--markdown", NULL, "0", "settings: print the registry as Markdown")
DI_SETTING(verbose, BOOL, "--verbose", "DEEPINFER_VERBOSE", "0", "log progress to stderr")
DI_SETTING(json_schema, STR, "--json-schema", NULL, "", "grammar-check: JSON schema file to check candidates against")
DI_SETTING(regex, STR, "--regex", NULL, "", "grammar-check: regex file (whole-output match)")
DI_SETTING(ebnf, STR, "--ebnf", NULL, "", "grammar-check: EBNF (GBNF / xgrammar syntax) file, start rule `root`")
DI_SETTING(json_compact, BOOL, "--json-compact", NULL, "0",
           "grammar-check: JSON schemas allow no whitespace between tokens (default: any JSON whitespace)")
