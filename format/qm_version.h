/* qm_version.h — the qmap tool version (distinct from the container format version in qm_format.h). */
#ifndef QM_VERSION_H
#define QM_VERSION_H

#define QMAP_VERSION "0.1.0"

#endif
