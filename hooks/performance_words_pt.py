"""The performance page's words in Brazilian Portuguese (keys as WORDS['en'] in hooks/performance.py)."""

# Unit labels keep an ASCII ", " before the unit: hooks/performance.py splits WORDS["fb"] on ",".
WORDS = {
    "gpu": "GPU", "date": "Data", "matmul": "matmul bf16, TFLOP/s", "copy": "Cópia, GB/s",
    "seconds": "Suíte, s", "shape": "Shape", "ms": "ms", "fb": "forward + backward, ms",
    "fwd": "forward, ms", "vs": "{a} vs. {b}", "variant": "Variante", "case": "Caso",
    "model": "Modelo", "batch": "Batch", "kv": "Tokens de KV", "floor": "fração do piso de HBM",
    "tflops": "TFLOP/s", "setting": "Configuração", "of_cudnn": "fração do cuDNN", "sliding": "janela deslizante de {w}, {t} tokens",
    "documents": "{n} documentos, {t} tokens, o mais longo com {l}",
    "stale": "Este registro foi feito antes da última alteração em snippets/bench.py.",
    "intensity": "FLOPs por byte de tráfego de HBM", "roof": "limites desta GPU",
    "tokens_axis": "tokens de KV", "latency_axis": "ms por passo de decodificação", "floor_line": "piso de HBM",
    "failed": "falhou",
    "seed-fa2": "Na {gpu} (Hopper; nenhuma GPU Ampere rodou aqui), o forward e backward causal do FlexAttention "
                "alcança de {lo:.2f}× a {hi:.2f}× a velocidade do backend FlashAttention 2 do SDPA nos shapes "
                "de treinamento.",
    "seed-fa3": "O FlashAttention 3 não faz parte do PyTorch e não foi medido. Na {gpu}, o backend cuDNN do SDPA "
                "alcança de {lo:.2f}× a {hi:.2f}× a velocidade do FlexAttention no forward e backward.",
    "seed-decoding": "Na {gpu}, a decodificação do FlexAttention alcança de {lo:.2f}× a {hi:.2f}× a velocidade do "
                     "SDPA com enable_gqa (abaixo de 1: mais lenta) e de {lo2:.0f}× a {hi2:.0f}× a velocidade da "
                     "abordagem de 2024 do gpt-fast, que repete as heads de KV e mascara o cache inteiro.",
    "seed-documents": "Na {gpu}, com uma máscara de documentos, o forward e backward de {n} documentos empacotados "
                      "({t} tokens, o mais longo com {l}) alcança {x:.1f}× a velocidade dos mesmos documentos com "
                      "padding até o comprimento do mais longo.",
    "seed-scaling": "Na {gpu}, a decodificação do FlexAttention é {lo1:.2f}× a {hi1:.2f}× tão rápida quanto o SDPA "
                    "com {short} tokens de KV e {lo2:.2f}× a {hi2:.2f}× com {long}: em relação ao SDPA, a razão não "
                    "cresce com o contexto; em relação à linha de base do gpt-fast de 2024, cresce.",
    "best-forward": "Na {gpu}, o forward causal mais rápido do FlexAttention entre os medidos ({name}) alcança "
                    "{best:.0%} da velocidade do cuDNN; o padrão alcança {default:.0%}.",
    "best-decoding": "Na {gpu}, a configuração de decodificação mais rápida entre as medidas ({name}) alcança "
                     "{best:.2f}× a velocidade do SDPA e {floor:.0%} do piso de HBM; a configuração padrão: {default:.2f}× "
                     "e {dfloor:.0%}.",
    "name_sdpa_dense_mask": "SDPA + máscara densa",
    "name_flex_packed": "FlexAttention, empacotado",
    "name_sdpa_padded": "SDPA flash, com padding",
    "name_flex_enable_gqa": "FlexAttention, enable_gqa=True",
    "name_flex_repeat_interleave": "FlexAttention, repeat_interleave",
    "memory": "pico de memória além das entradas, MiB",
    "gqa_training": "treinamento, {b} × {t} tokens, {hq}/{hkv} heads, forward + backward",
    "gqa_decoding": "decodificação, batch {b}, {t} tokens de KV, {hq}/{hkv} heads",
    "situation": "Situação", "use": "Usar",
    "situation_plain": "só atenção causal, nada mais (treinamento)",
    "situation_sliding": "janela deslizante", "situation_documents": "documentos empacotados",
    "situation_decoding": "decodificação sobre um cache KV, só causal",
    "use_sdpa": "SDPA", "use_flex": "FlexAttention + BlockMask", "use_sdpa_gqa": "SDPA, enable_gqa=True",
    "choose_plain": "cuDNN com {lo:.2f}–{hi:.2f}× a velocidade do FlexAttention",
    "choose_sliding": "{x:.1f}× a velocidade do SDPA com máscara densa",
    "choose_documents": "{x:.1f}× a velocidade da versão com padding, {y:.1f}× a velocidade com máscara densa",
    "choose_decoding": "SDPA com {lo:.2f}–{hi:.2f}× a velocidade do FlexAttention",
}
