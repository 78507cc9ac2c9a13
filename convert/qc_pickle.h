/* qc_pickle.h — a restricted pickle reader for the `data.pkl` of a torch.save zip archive.
 *
 * It interprets the pickle opcodes a state_dict needs and nothing else: it builds plain values (ints,
 * floats, strings, tuples, lists, dicts) and, for an allowlist of globals, records what those calls
 * would have made (a tensor view of a storage) without calling anything. The allowlist is the part of
 * torch.load(weights_only=True) a state_dict of dense tensors uses:
 *   collections.OrderedDict, torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter,
 *   torch._utils._rebuild_parameter_with_state, torch.<T>Storage for the ten qc_dtype element types,
 *   and the torch.<dtype> objects (as plain values).
 * Any other opcode (INST, OBJ, NEWOBJ, EXT*, protocol-0 text opcodes, …) or global is refused with
 * QM_ERR_FORBIDDEN naming it and its byte offset in data.pkl. Malformed input (truncation, stack
 * underflow, bad memo index, wrong argument types) is QM_ERR_BAD_SOURCE.
 *
 * Resources are bounded whatever the input: the reader never recurses, and the stack, the open MARKs,
 * the memo, the number of values and container items, string lengths and value nesting all have caps
 * (QC_PICKLE_MAX_*), each refused with its own message.
 *
 * The result is the list of tensors of the state_dict: the top-level dict (OrderedDict or dict) if all
 * its values are tensors, else its "state_dict" or "model" entry when exactly one of them is such a
 * dict (other entries, such as "epoch", are ignored).
 */
#ifndef QC_PICKLE_H
#define QC_PICKLE_H

#include <stddef.h>
#include <stdint.h>

#include "qc_source.h"
#include "qm_error.h"

#define QC_PICKLE_MAX_INPUT   (1ull << 30)  /* bytes of data.pkl */
#define QC_PICKLE_MAX_STACK   (1u << 18)    /* values on the stack (SETITEMS batches hold ~2000) */
#define QC_PICKLE_MAX_DEPTH   64u           /* open MARKs, and nesting of containers */
#define QC_PICKLE_MAX_MEMO    (1u << 22)    /* memo keys are below this */
#define QC_PICKLE_MAX_VALUES  (1u << 21)    /* values made in total (~15 per tensor; 32 bytes each) */
#define QC_PICKLE_MAX_ITEMS   (1u << 22)    /* container elements in total (a dict item counts 2) */
#define QC_PICKLE_MAX_STRING  (1u << 28)    /* bytes of one str / bytes value */
#define QC_PICKLE_MAX_GLOBAL  256u          /* bytes of a GLOBAL's module or name */

/* One tensor of the state_dict, as _rebuild_tensor_v2 describes it. */
typedef struct qc_pickle_tensor {
    char *name;                  /* owned; the state_dict key (UTF-8, no NUL) */
    qc_dtype dtype;              /* from the storage type (torch.FloatStorage -> QC_F32, …) */
    char *storage_key;           /* owned; the persistent id's key: the archive entry is <prefix>/data/<key>
                                  * (non-empty, only [A-Za-z0-9_.-], not "." or "..") */
    uint64_t storage_numel;      /* elements of the storage, as the persistent id says */
    uint64_t offset;             /* storage_offset, in elements */
    uint32_t rank;
    uint64_t shape[QC_MAX_RANK];
    int64_t stride[QC_MAX_RANK]; /* in elements, as pickled (not checked against the storage here) */
    uint64_t pickle_offset;      /* offset in data.pkl of the REDUCE that built it, for messages */
} qc_pickle_tensor;

typedef struct qc_pickle_result {
    qc_pickle_tensor *tensors;   /* owned; in dict order; names are unique */
    size_t n_tensors;
} qc_pickle_result;

/* Interpret `len` bytes of data.pkl. `file` names it in messages (e.g. "m.pt (archive/data.pkl)").
 * On success fills *out (free it with qc_pickle_result_free); on failure *out is empty. */
qm_status qc_pickle_read_state_dict(const uint8_t *data, size_t len, const char *file,
                                    qc_pickle_result *out, qm_error *err);
void qc_pickle_result_free(qc_pickle_result *r);   /* NULL allowed; leaves *r empty */

#endif /* QC_PICKLE_H */
