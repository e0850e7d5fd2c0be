"""DeepSpeed's own model-state estimators for stages 1-2 (estimate_zero2_model_states_mem_needs) for a
parameter count, one node of N GPUs: prints JSON {stage: {gpu_bytes, cpu_bytes}} with and without
optimizer offload, to sit beside `ferry bench memory --dp N --zero-stage 1,2` (benchmarks/zero_benchmark.sh).
    python deepspeed_zero_estimates.py PARAMETERS GPUS
"""
import json
import sys

from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

parameters, gpus = int(sys.argv[1]), int(sys.argv[2])
result = {}
for offload in (False, True):
    cpu, gpu = estimate_zero2_model_states_mem_needs(parameters, num_gpus_per_node=gpus, num_nodes=1, cpu_offload=offload,
                                                       additional_buffer_factor=1.5)
    result["offload" if offload else "device"] = {"gpu_bytes": int(gpu), "cpu_bytes": int(cpu)}
print(json.dumps(result))
