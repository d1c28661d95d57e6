"""The performance page's words in Simplified Chinese (keys as WORDS['en'] in hooks/performance.py)."""

# Unit labels keep an ASCII ", " before the unit: hooks/performance.py splits WORDS["fb"] on ",".
WORDS = {
    "gpu": "GPU", "date": "日期", "matmul": "bf16 矩阵乘法, TFLOP/s", "copy": "拷贝, GB/s",
    "seconds": "整套测试耗时, s", "shape": "形状", "ms": "ms", "fb": "前向 + 反向, ms",
    "fwd": "前向, ms", "vs": "{a} 相对 {b} 加速比", "variant": "变体", "case": "用例",
    "model": "模型", "batch": "批大小", "kv": "KV token 数", "floor": "HBM 下限占比",
    "tflops": "TFLOP/s", "setting": "设置", "of_cudnn": "cuDNN 速度占比", "sliding": "滑动窗口 {w}，{t} 个 token", "documents": "{n} 个文档，{t} 个 token，最长 {l} 个 token",
    "stale": "此记录生成于 snippets/bench.py 最近一次修改之前。",
    "intensity": "每字节 HBM 流量的 FLOPs 数", "roof": "该 GPU 的性能上限",
    "tokens_axis": "KV token 数", "latency_axis": "每个解码步骤耗时, ms", "floor_line": "HBM 下限",
    "failed": "失败",
    "seed-fa2": "在 {gpu}（Hopper；这里没有 Ampere GPU 参与运行）上，在各训练形状下，FlexAttention 的因果前向与反向传播"
                "速度是 SDPA 的 FlashAttention 2 后端的 {lo:.2f}× 至 {hi:.2f}×。",
    "seed-fa3": "FlashAttention 3 不属于 PyTorch，未作测量。在 {gpu} 上，SDPA 的 cuDNN 后端在前向与反向传播中的速度"
                "是 FlexAttention 的 {lo:.2f}× 至 {hi:.2f}×。",
    "seed-decoding": "在 {gpu} 上，FlexAttention 解码的速度是使用 enable_gqa 的 SDPA 的 {lo:.2f}× 至 {hi:.2f}×"
                     "（低于 1 表示更慢），是 2024 年 gpt-fast 基线（重复 KV 头并对整个缓存施加掩码）的 "
                     "{lo2:.0f}× 至 {hi2:.0f}×。",
    "seed-documents": "在 {gpu} 上，{n} 个打包文档（共 {t} 个 token，最长 {l} 个 token）使用文档掩码时，前向与反向传播"
                      "的速度是把相同文档填充到最长长度时的 {x:.1f}×。",
    "seed-scaling": "在 {gpu} 上，FlexAttention 解码的速度在 {short} 个 KV token 时是 SDPA 的 {lo1:.2f}× 至 {hi1:.2f}×，"
                    "在 {long} 个时是 {lo2:.2f}× 至 {hi2:.2f}×：相对 SDPA，这一比值并不随上下文增长；"
                    "相对 2024 年的 gpt-fast 基线则会增长。",
    "best-forward": "在 {gpu} 上，实测最快的 FlexAttention 因果前向设置（{name}）达到 cuDNN 速度的 {best:.0%}；"
                    "默认设置达到 {default:.0%}。",
    "best-decoding": "在 {gpu} 上，实测最快的解码设置（{name}）速度是 SDPA 的 {best:.2f}×，达到 HBM 下限的 {floor:.0%}；"
                     "默认设置分别为 {default:.2f}× 和 {dfloor:.0%}。",
    "name_sdpa_dense_mask": "SDPA + 稠密掩码",
    "name_flex_packed": "FlexAttention，打包",
    "name_sdpa_padded": "SDPA flash，填充",
    "name_flex_enable_gqa": "FlexAttention，enable_gqa=True",
    "name_flex_repeat_interleave": "FlexAttention，repeat_interleave",
    "memory": "输入之外的峰值显存, MiB",
    "gqa_training": "训练，{b} × {t} 个 token，{hq}/{hkv} 个头，前向 + 反向",
    "gqa_decoding": "解码，批大小 {b}，{t} 个 KV token，{hq}/{hkv} 个头",
    "situation": "场景", "use": "选用",
    "situation_plain": "仅因果注意力，无其他修改（训练）",
    "situation_sliding": "滑动窗口", "situation_documents": "打包文档",
    "situation_decoding": "基于 KV 缓存的解码，仅因果",
    "use_sdpa": "SDPA", "use_flex": "FlexAttention + BlockMask", "use_sdpa_gqa": "SDPA，enable_gqa=True",
    "choose_plain": "cuDNN 速度是 FlexAttention 的 {lo:.2f}–{hi:.2f}×",
    "choose_sliding": "速度是使用稠密掩码的 SDPA 的 {x:.1f}×",
    "choose_documents": "速度是填充做法的 {x:.1f}×，是稠密掩码的 {y:.1f}×",
    "choose_decoding": "SDPA 速度是 FlexAttention 的 {lo:.2f}–{hi:.2f}×",
}
