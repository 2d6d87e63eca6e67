#!/bin/bash
# Rendered by trainplan 0.1.0: what each node runs for megatron 0.16.1 (launch/framework.py).
set -euo pipefail
[ -d "$MEGATRON_LM" ] || git clone --depth 1 --branch core_v0.16.1 https://github.com/NVIDIA/Megatron-LM.git "$MEGATRON_LM"
exec torchrun --nnodes 1 --nproc-per-node 8 --rdzv-backend c10d \
  --rdzv-endpoint "$RDZV_ENDPOINT" --rdzv-id "$SLURM_JOB_ID" \
  "$MEGATRON_LM/pretrain_gpt.py" \
    --num-layers 32 \
    --hidden-size 4096 \
    --ffn-hidden-size 14336 \
    --num-attention-heads 32 \
    --normalization RMSNorm \
    --swiglu \
    --untie-embeddings-and-output-weights \
    --disable-bias-linear \
    --position-embedding-type rope \
    --softmax-type vanilla \
    --group-query-attention \
    --kv-channels 128 \
    --num-query-groups 8 \
    --tokenizer-type NullTokenizer \
    --vocab-size 128255 \
    --make-vocab-size-divisible-by 128 \
    --rotary-base 500000 \
    --max-position-embeddings 131072 \
    --tensor-model-parallel-size 2 \
    --sequence-parallel \
    --pipeline-model-parallel-size 1 \
    --context-parallel-size 1 \
    --micro-batch-size 1 \
    --global-batch-size 16 \
    --seq-length 8192 \
    --bf16 \
    --use-distributed-optimizer \
    --recompute-granularity selective \
    --cuda-graph-impl none \
    --train-iters 1000 \
    --lr 0.0003 \
    --min-lr 3e-05 \
    --lr-decay-style cosine \
    --lr-warmup-iters 100 \
    --weight-decay 0.1 \
    --adam-beta1 0.9 \
    --adam-beta2 0.95 \
    --clip-grad 1 \
    --seed 0 \
    --log-interval 1 \
    --log-throughput \
    --eval-iters 0 \
    --exit-signal-handler \
    --save-interval 200 \
    --mock-data \
    --save "$CHECKPOINT_DIR" \
    --load "$CHECKPOINT_DIR"
