/* qm_error.h — status codes and error reports shared by every qmap module.
 *
 * Contract: every fallible qmap function returns a qm_status. QM_OK (0) is success; any other value is
 * an error whose name and generic description never change once released (codes are append-only).
 * Functions that take a `qm_error *err` fill it on failure (when err is not NULL) with the code, the
 * file offset the problem was found at, the field, and a one-line message that names the file, the field
 * and the offset. The library never prints and never exits.
 */
#ifndef QM_ERROR_H
#define QM_ERROR_H

#include <stdint.h>

/* X-macro: (enum name, value, short description). Values are frozen; never reuse a retired one. */
#define QM_STATUS_LIST(X) \
    X(QM_OK,                     0, "success") \
    X(QM_ERR_IO,                 1, "I/O error") \
    X(QM_ERR_NOMEM,              2, "out of memory") \
    X(QM_ERR_INVALID_ARGUMENT,   3, "invalid argument") \
    X(QM_ERR_STATE,              4, "call not allowed in this state") \
    X(QM_ERR_NOT_FOUND,          5, "not found") \
    X(QM_ERR_TYPE_MISMATCH,      6, "value has another type") \
    X(QM_ERR_OVERFLOW,           7, "size or offset overflows 64 bits")           /* R-GEN-1 */ \
    X(QM_ERR_BAD_MAGIC,          8, "not a qmap file (bad magic)")                /* R-HDR-1 */ \
    X(QM_ERR_UNSUPPORTED_VERSION,9, "unsupported major version")                  /* R-HDR-2 */ \
    X(QM_ERR_TRUNCATED,         10, "file is shorter than its header says")       /* R-HDR-1,3 */ \
    X(QM_ERR_TRAILING_BYTES,    11, "file is longer than its header says")        /* R-HDR-4 */ \
    X(QM_ERR_BAD_ALIGNMENT,     12, "alignment is not a power of two in [64, 2^30]") /* R-HDR-5 */ \
    X(QM_ERR_RESERVED_NONZERO,  13, "reserved field is not zero")                 /* R-HDR-6, R-TENSOR-9 */ \
    X(QM_ERR_TOO_MANY,          14, "count above the format's cap")               /* R-HDR-7 */ \
    X(QM_ERR_BAD_LAYOUT,        15, "section offsets are not where the format puts them") /* R-HDR-8 */ \
    X(QM_ERR_HEADER_CHECKSUM,   16, "header checksum mismatch")                   /* R-HDR-9 */ \
    X(QM_ERR_PADDING_NONZERO,   17, "padding byte is not zero")                   /* R-HDR-10, R-DATA-2 */ \
    X(QM_ERR_META_OVERRUN,      18, "metadata entry extends past its section")    /* R-META-1 */ \
    X(QM_ERR_BAD_KEY,           19, "metadata key is empty or too long")          /* R-META-2 */ \
    X(QM_ERR_BAD_UTF8,          20, "string is not valid UTF-8 or contains NUL")  /* R-META-3,7, R-TENSOR-3 */ \
    X(QM_ERR_UNKNOWN_META_TYPE, 21, "unknown metadata value type")                /* R-META-4 */ \
    X(QM_ERR_BAD_BOOL,          22, "boolean byte is not 0 or 1")                 /* R-META-5 */ \
    X(QM_ERR_META_TOO_LONG,     23, "string or array longer than the format's cap") /* R-META-6 */ \
    X(QM_ERR_DUPLICATE_KEY,     24, "duplicate metadata key")                     /* R-META-8 */ \
    X(QM_ERR_META_SIZE,         25, "metadata entries do not fill their section") /* R-META-9 */ \
    X(QM_ERR_TABLE_OVERRUN,     26, "tensor table entry extends past its section, or bytes are left over") /* R-TENSOR-1 */ \
    X(QM_ERR_BAD_NAME,          27, "tensor name is empty or too long")           /* R-TENSOR-2 */ \
    X(QM_ERR_DUPLICATE_NAME,    28, "duplicate tensor name")                      /* R-TENSOR-4 */ \
    X(QM_ERR_UNKNOWN_DTYPE,     29, "unknown dtype")                              /* R-TENSOR-5 */ \
    X(QM_ERR_BAD_RANK,          30, "rank is not in 1..4")                        /* R-TENSOR-6 */ \
    X(QM_ERR_BAD_DIM,           31, "dimension is zero or above 2^32")            /* R-TENSOR-7 */ \
    X(QM_ERR_TOO_MANY_ELEMENTS, 32, "element count above 2^40")                   /* R-TENSOR-8 */ \
    X(QM_ERR_SIZE_MISMATCH,     33, "byte size does not match dtype and dims")    /* R-TENSOR-10 */ \
    X(QM_ERR_MISALIGNED,        34, "tensor data is not aligned")                 /* R-TENSOR-11 */ \
    X(QM_ERR_OUT_OF_BOUNDS,     35, "tensor data lies outside the data region")   /* R-TENSOR-12 */ \
    X(QM_ERR_TENSOR_OVERLAP,    36, "tensor overlaps the previous one or is out of order") /* R-TENSOR-13 */ \
    X(QM_ERR_DATA_END,          37, "last tensor does not end at the end of the file") /* R-TENSOR-14 */ \
    X(QM_ERR_TENSOR_CHECKSUM,   38, "tensor checksum mismatch")                   /* R-DATA-1 */ \
    X(QM_ERR_BAD_TENSOR_DATA,   39, "tensor data breaks its dtype's rules")       /* R-DATA-2 */ \
    /* 40..: errors about the inputs of qmap convert / quantize (not about .qmap files) */ \
    X(QM_ERR_BAD_SOURCE,        40, "input file is malformed or truncated") \
    X(QM_ERR_UNSUPPORTED,       41, "input uses a feature qmap does not support") \
    X(QM_ERR_FORBIDDEN,         42, "pickle uses a global or opcode that is not allowed") \
    X(QM_ERR_SHAPE,             43, "tensor shape does not match the model") \
    X(QM_ERR_MISSING_TENSOR,    44, "a tensor the model needs is missing") \
    X(QM_ERR_UNEXPECTED_TENSOR, 45, "a tensor the model does not use is present") \
    X(QM_ERR_NONFINITE,         46, "weight contains NaN or Inf") \
    X(QM_ERR_BAD_CONFIG,        47, "model config is missing a value or has a bad one") \
    X(QM_ERR_UNKNOWN_ARCH,      48, "unknown model architecture")

typedef enum qm_status {
#define QM_X_ENUM(name, value, desc) name = value,
    QM_STATUS_LIST(QM_X_ENUM)
#undef QM_X_ENUM
} qm_status;

#define QM_NO_OFFSET UINT64_MAX

typedef struct qm_error {
    qm_status code;
    uint64_t offset;     /* file offset the error refers to, or QM_NO_OFFSET */
    char field[64];      /* e.g. "header.alignment", "tensor[3].dims[1]" ("" if none) */
    char message[640];   /* "FILE: FIELD at offset N: what is wrong [QM_ERR_NAME]": one line of valid
                          * UTF-8 (control bytes from quoted names become '?'), truncated to fit */
} qm_error;

/* "QM_ERR_BAD_MAGIC"; "QM_ERR_UNKNOWN" for a value outside the list. Never NULL. */
const char *qm_status_name(qm_status s);
/* The short description from the list. Never NULL. */
const char *qm_status_string(qm_status s);
/* Look a status up by its name ("QM_ERR_BAD_MAGIC" or "BAD_MAGIC"); -1 if unknown. For tests and tools. */
int qm_status_from_name(const char *name);

/* Fill *err (if not NULL) and return `code`. `file` may be NULL, `field` may be NULL or "",
 * `offset` may be QM_NO_OFFSET. The message is printf-formatted and appended after the location. */
qm_status qm_fail(qm_error *err, qm_status code, const char *file, const char *field, uint64_t offset,
                  const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;

/* Reset *err to "no error" (code QM_OK, empty strings). */
void qm_error_clear(qm_error *err);

#endif /* QM_ERROR_H */
