// The events of the GPU pipelines' trace hooks (FP8ATTN_TRACE, common.h), for lab builds only: no
// kernel includes this file. A trace build defines FP8ATTN_TRACE(event) before including the kernels
// and includes this file for the names (lab/standalone/event_trace.h records a timestamp per warp
// leader).
#pragma once

namespace fp8attn {

enum TraceEvent : int {
  // fwd_kernel (portable and decode pipelines)
  kTraceKernelStart = 19,
  kTraceRowsStored = 28,
  // wgmma producer (warp 0 of the block)
  kTraceProducerItem = 1,        // a work item starts
  kTraceProducerDrained = 2,     // the previous item's tiles are finalized
  kTraceProducerQ = 3,           // Q stored, q_full arrived
  kTraceProducerIssued = 4,      // the item's KV copies are issued
  kTraceProducerFinalized = 5,   // a tile is complete (k_full, v_full)
  kTraceProducerSlotWait = 6,    // it waits for a free ring slot ...
  kTraceProducerSlotGo = 7,      // ... and has it
  kTraceProducerLanded = 8,      // finalize: its copies have landed
  kTraceProducerBarrier = 9,     // finalize: every producer's copies landed (named barrier)
  kTraceProducerCopied = 18,     // a tile's copies are issued
  // wgmma consumers (warps 4 and 8: the leaders of the two consumer warpgroups)
  kTraceConsumerItem = 10,       // a work item starts
  kTraceConsumerQ = 11,          // q_full passed
  kTraceConsumerFirstK = 12,     // the first tile's k_full passed
  kTraceConsumerStepWait = 13,   // a KV step waits for its tiles (the next K and this V) ...
  kTraceConsumerStepGo = 16,     // ... and has them
  kTraceConsumerStepDone = 17,   // its P.V retired (issue, S, softmax, P.V wait)
  kTraceConsumerLoopDone = 14,   // the item's last P.V retired
  kTraceConsumerStored = 15,     // the epilogue is done
  // decode pipeline (every warp)
  kTraceDecodeStart = 20,        // the ring is set up
  kTraceDecodeFirstIssued = 27,  // the first tiles' copies are issued
  kTraceDecodeQ = 24,            // Q and the rows are loaded
  kTraceDecodeLanded = 21,       // a tile's copies have landed
  kTraceDecodeStepped = 22,      // its step is computed
  kTraceDecodeIssued = 23,       // the next tile's copies are issued
  kTraceDecodeReduced = 25,      // the warps' partial results are summed
};

// Short names for the cycle accounting of the standalone checks (event_stats.h; the event trace prints ids,
// which lab/scripts/trace_summary.py names from this enum).
inline const char* trace_event_name(int e) {
  switch (e) {
    case kTraceKernelStart: return "kernel start";
    case kTraceRowsStored: return "rows stored";
    case kTraceProducerItem: return "P item";
    case kTraceProducerDrained: return "P drained";
    case kTraceProducerQ: return "P Q stored";
    case kTraceProducerIssued: return "P item issued";
    case kTraceProducerFinalized: return "P tile finalized";
    case kTraceProducerSlotWait: return "P slot wait";
    case kTraceProducerSlotGo: return "P slot free (empty)";
    case kTraceProducerLanded: return "P tile landed";
    case kTraceProducerBarrier: return "P all copies landed";
    case kTraceProducerCopied: return "P tile issued";
    case kTraceConsumerItem: return "C item";
    case kTraceConsumerQ: return "C q_full";
    case kTraceConsumerFirstK: return "C first k_full";
    case kTraceConsumerStepWait: return "C step start";
    case kTraceConsumerStepGo: return "C k_full + v_full";
    case kTraceConsumerStepDone: return "C step body done";
    case kTraceConsumerLoopDone: return "C last P.V done";
    case kTraceConsumerStored: return "C epilogue done";
    case kTraceDecodeStart: return "D start";
    case kTraceDecodeFirstIssued: return "D first issued";
    case kTraceDecodeQ: return "D Q loaded";
    case kTraceDecodeLanded: return "D tile landed";
    case kTraceDecodeStepped: return "D step done";
    case kTraceDecodeIssued: return "D next issued";
    case kTraceDecodeReduced: return "D reduced";
    default: return "?";
  }
}

}  // namespace fp8attn
