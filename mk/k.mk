# mk/k.mk — build flags of the shared runtime ops, KV cache, attention and sampler (helper K).
# qr_ops: elementwise loops for the vectoriser. qr_attn_avx2, qr_attn_avx512: only called after a CPU check
# (qr_attn.c).
ISA_FLAGS_qr_ops       := -O3
ISA_FLAGS_qr_kv        := -O3
ISA_FLAGS_qr_attn      := -O3
ISA_FLAGS_qr_attn_avx2 := -O3 -mavx2 -mfma -mf16c
ISA_FLAGS_qr_attn_avx512 := -O3 -mavx512f -mavx512bw -mavx512vl -mfma -mf16c
ISA_FLAGS_qr_ops_avx2  := -O3 -mavx2 -mfma -mf16c
