"""The performance page's words in Hindi (keys as WORDS['en'] in hooks/performance.py)."""

WORDS = {
    "gpu": "GPU", "date": "तारीख", "matmul": "bf16 matmul, TFLOP/s", "copy": "कॉपी, GB/s",
    "seconds": "पूरे suite का समय, s", "shape": "आकार", "ms": "ms", "fb": "forward और backward, ms",
    "fwd": "सिर्फ़ forward, ms", "vs": "{a} बनाम {b}", "variant": "वैरिएंट", "case": "केस",
    "model": "मॉडल", "batch": "बैच", "kv": "KV tokens की संख्या", "floor": "HBM न्यूनतम सीमा का अनुपात",
    "tflops": "TFLOP/s", "setting": "सेटिंग", "of_cudnn": "cuDNN की गति का अनुपात", "sliding": "{w} की sliding window, {t} tokens", "documents": "{n} documents, {t} tokens, सबसे लंबा {l}",
    "stale": "यह record snippets/bench.py में हुए पिछले बदलाव से पहले बनाया गया था।",
    "intensity": "HBM traffic के प्रति byte FLOPs", "roof": "इस GPU की अधिकतम सीमाएँ",
    "tokens_axis": "KV tokens की संख्या", "latency_axis": "हर decoding step के ms", "floor_line": "HBM न्यूनतम सीमा",
    "failed": "विफल",
    "seed-fa2": "{gpu} पर (Hopper; यहाँ कोई Ampere GPU नहीं चला), training shapes में FlexAttention का causal "
                "forward और backward, SDPA के FlashAttention 2 backend की तुलना में {lo:.2f}× से {hi:.2f}× "
                "की गति से चलता है।",
    "seed-fa3": "FlashAttention 3, PyTorch का हिस्सा नहीं है और उसे मापा नहीं गया। {gpu} पर forward और backward में "
                "SDPA का cuDNN backend, FlexAttention की तुलना में {lo:.2f}× से {hi:.2f}× की गति से चलता है।",
    "seed-decoding": "{gpu} पर FlexAttention decoding, enable_gqa वाले SDPA की तुलना में {lo:.2f}× से {hi:.2f}× "
                     "की गति से चलती है (1 से कम का मतलब: धीमी), और 2024 के उस gpt-fast baseline की तुलना में "
                     "{lo2:.0f}× से {hi2:.0f}× की गति से, जो KV heads को दोहराता है और पूरे cache पर mask लगाता है।",
    "seed-documents": "{gpu} पर {n} packed documents ({t} tokens, सबसे लंबा {l}) का forward और backward, "
                      "document mask के साथ, सबसे लंबे document तक pad किए गए उन्हीं documents की तुलना में "
                      "{x:.1f}× की गति से चलता है।",
    "seed-scaling": "{gpu} पर FlexAttention डिकोडिंग {short} KV टोकन पर SDPA से {lo1:.2f}× से {hi1:.2f}× तेज़ है "
                    "और {long} पर {lo2:.2f}× से {hi2:.2f}×: SDPA की तुलना में यह अनुपात संदर्भ के साथ नहीं बढ़ता; "
                    "2024 की gpt-fast बेसलाइन की तुलना में बढ़ता है।",
    "best-forward": "{gpu} पर मापे गए causal forward में FlexAttention की सबसे तेज़ setting ({name}) cuDNN की "
                    "गति का {best:.0%} हासिल करती है; default setting {default:.0%} तक पहुँचती है।",
    "best-decoding": "{gpu} पर मापी गई decoding settings में सबसे तेज़ ({name}), SDPA की तुलना में {best:.2f}× की "
                     "गति से चलती है और HBM न्यूनतम सीमा का {floor:.0%} हासिल करती है; default: {default:.2f}× "
                     "और {dfloor:.0%}।",
    "name_sdpa_dense_mask": "SDPA + सघन मास्क",
    "name_flex_packed": "FlexAttention, पैक किया हुआ",
    "name_sdpa_padded": "SDPA flash, padding के साथ",
    "name_flex_enable_gqa": "FlexAttention, enable_gqa=True",
    "name_flex_repeat_interleave": "FlexAttention, repeat_interleave",
    "memory": "inputs के अलावा peak memory, MiB",
    "gqa_training": "training, {b} × {t} tokens, {hq}/{hkv} heads, forward और backward",
    "gqa_decoding": "decoding, बैच {b}, {t} KV tokens, {hq}/{hkv} heads",
    "situation": "स्थिति", "use": "क्या इस्तेमाल करें",
    "situation_plain": "सिर्फ़ causal attention, और कुछ नहीं (training)",
    "situation_sliding": "sliding window", "situation_documents": "packed documents",
    "situation_decoding": "KV cache पर decoding, सिर्फ़ causal",
    "use_sdpa": "SDPA", "use_flex": "FlexAttention + BlockMask", "use_sdpa_gqa": "SDPA, enable_gqa=True",
    "choose_plain": "cuDNN, FlexAttention की तुलना में {lo:.2f}–{hi:.2f}× की गति से",
    "choose_sliding": "dense mask वाले SDPA की तुलना में {x:.1f}× की गति से",
    "choose_documents": "padding की तुलना में {x:.1f}× और dense mask की तुलना में {y:.1f}× की गति से",
    "choose_decoding": "SDPA, FlexAttention की तुलना में {lo:.2f}–{hi:.2f}× की गति से",
}
