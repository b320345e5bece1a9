/* onnxsurgeon._scan: load's two per-element passes over the main graph, read from the model's
 * serialized bytes instead of through protobuf's Python objects (issue 14).
 *
 * Optional: onnxsurgeon/scan.py falls back to the pure-Python passes when this module is not
 * built, when ONNXSURGEON_SCAN=0, or when a function here returns None. They return None for
 * anything they do not read exactly as protobuf (upb) does: a graph field given twice (merged
 * by protobuf), a group, a truncated field, a name that is not valid UTF-8. The bytes were
 * parsed by protobuf first, so such input is rare; the Python pass then gives the one answer.
 *
 * Also the main graph's value_info entries (scan_value_info, value_info_entries).
 *
 * Every read is bounds-checked against the buffer. Field numbers follow onnx.proto:
 *   ModelProto.graph = 7; GraphProto.node = 1, .initializer = 5, .value_info = 13;
 *   ValueInfoProto.name = 1, .type = 2;
 *   TensorProto.dims = 1, .data_type = 2, .name = 8, .raw_data = 9.
 * A node's edge fields are not named here: scan_nodes is handed their numbers by its caller
 * (onnxsurgeon/nodefields.py EDGE_FIELD_NUMBERS, read from onnx's own NodeProto descriptor), so
 * validation, the index and this scan read the one description.
 * A known field with another wire type is an unknown field to protobuf, and is skipped here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Cursor;

/* One varint; 0 when truncated or longer than 10 bytes. */
static int varint(Cursor *c, uint64_t *out) {
    uint64_t v = 0;
    for (int shift = 0; shift < 70 && c->p < c->end; shift += 7) {
        uint8_t b = *c->p++;
        if (shift == 63 && b > 1) return 0;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = v;
            return 1;
        }
    }
    return 0;
}

/* The next field: its number, wire type and its payload (wire type 2) or value (wire type 0).
 * 0 at the end, -1 on anything not read exactly (a group, a truncated field, field number 0). */
static int next_field(Cursor *c, uint32_t *number, int *wire, Cursor *payload,
                      uint64_t *value) {
    uint64_t tag, len;
    if (c->p >= c->end) return 0;
    if (!varint(c, &tag)) return -1;
    *number = (uint32_t)(tag >> 3);
    *wire = (int)(tag & 7);
    if (*number == 0 || (tag >> 3) > 0x1fffffff) return -1;
    switch (*wire) {
    case 0:
        if (!varint(c, value)) return -1;
        return 1;
    case 1:
        if (c->end - c->p < 8) return -1;
        c->p += 8;
        return 1;
    case 2:
        if (!varint(c, &len) || len > (uint64_t)(c->end - c->p)) return -1;
        payload->p = c->p;
        payload->end = c->p + len;
        c->p += len;
        return 1;
    case 5:
        if (c->end - c->p < 4) return -1;
        c->p += 4;
        return 1;
    default:
        return -1; /* groups (3, 4) and invalid wire types */
    }
}

/* The main graph's bytes inside a serialized ModelProto: 1 and the span when the graph field
 * appears exactly once, 0 otherwise (absent, or several occurrences that protobuf merges), -1
 * when the bytes are not read exactly. */
static int graph_span(const uint8_t *data, Py_ssize_t size, Cursor *graph) {
    Cursor c = {data, data + size}, f;
    uint32_t number;
    uint64_t value;
    int wire, r, seen = 0;
    while ((r = next_field(&c, &number, &wire, &f, &value)) == 1) {
        if (number == 7 && wire == 2) {
            *graph = f;
            seen++;
        }
    }
    if (r < 0) return -1;
    return seen == 1;
}

static PyObject *text(Cursor s) {
    return PyUnicode_DecodeUTF8((const char *)s.p, s.end - s.p, NULL);
}

/* A small cache of repeated texts (op types, domains): the same str object for the same bytes. */
#define CACHE 16
typedef struct {
    Cursor key[CACHE];
    PyObject *value[CACHE];
    int used;
    int next;
} TextCache;

static PyObject *cached_text(TextCache *cache, Cursor s) {
    Py_ssize_t n = s.end - s.p;
    for (int k = 0; k < cache->used; k++) {
        Cursor key = cache->key[k];
        if (key.end - key.p == n && memcmp(key.p, s.p, n) == 0) {
            Py_INCREF(cache->value[k]);
            return cache->value[k];
        }
    }
    PyObject *value = text(s);
    if (value == NULL) return NULL;
    int slot = cache->used < CACHE ? cache->used++ : (cache->next++ % CACHE);
    Py_XDECREF(cache->value[slot]);
    cache->key[slot] = s;
    Py_INCREF(value);
    cache->value[slot] = value;
    return value;
}

static void cache_clear(TextCache *cache) {
    for (int k = 0; k < cache->used; k++) Py_CLEAR(cache->value[k]);
    cache->used = 0;
}

/* The names a node pass decodes, by the hash of their bytes (direct-mapped, SLOTS entries): a
 * name read again (an output read by the next nodes, a weight read by many) is the same str,
 * its hash already computed, instead of a new decode. An entry's bytes are compared in full. */
#define SLOTS 4096
typedef struct {
    const uint8_t *p;
    Py_ssize_t n;
    PyObject *text;
} Slot;

static PyObject *slot_text(Slot *slots, Cursor s) {
    Py_ssize_t n = s.end - s.p;
    uint32_t h = 2166136261u; /* FNV-1a */
    for (Py_ssize_t k = 0; k < n; k++) h = (h ^ s.p[k]) * 16777619u;
    Slot *slot = &slots[(h ^ (uint32_t)n) & (SLOTS - 1)];
    if (slot->text != NULL && slot->n == n && memcmp(slot->p, s.p, n) == 0) {
        Py_INCREF(slot->text);
        return slot->text;
    }
    PyObject *value = text(s);
    if (value == NULL) return NULL;
    Py_XSETREF(slot->text, value);
    Py_INCREF(value);
    slot->p = s.p;
    slot->n = n;
    return value;
}

static void slots_clear(Slot *slots) {
    if (slots == NULL) return;
    for (int k = 0; k < SLOTS; k++) Py_CLEAR(slots[k].text);
    PyMem_Free(slots);
}

static int append_new(PyObject *list, PyObject *item) {
    if (item == NULL) return -1;
    int r = PyList_Append(list, item);
    Py_DECREF(item);
    return r;
}

/* Append the text ``s`` to ``list`` (``empty`` when the field is absent; through ``cache`` when
 * given). -1 on failure, with *bail set when the bytes are not UTF-8 (the Python pass then
 * gives protobuf's answer). */
static int append_text(PyObject *list, Cursor s, TextCache *cache, PyObject *empty, int *bail) {
    PyObject *item;
    if (s.p == NULL) {
        Py_INCREF(empty);
        item = empty;
    } else {
        item = cache ? cached_text(cache, s) : text(s);
    }
    if (item == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) *bail = 1;
        return -1;
    }
    return append_new(list, item);
}

/* What a scan returns: its result, or None (no exception) when it gave up reading. */
static PyObject *answer(PyObject *result, int bail) {
    if (!bail) return result;
    PyErr_Clear();
    Py_XDECREF(result);
    Py_RETURN_NONE;
}

/* The fields of the main graph in ``buf``; 0 (bail) unless the graph field appears once. */
static int main_graph(Py_buffer *buf, Cursor *graph) {
    return graph_span((const uint8_t *)buf->buf, buf->len, graph) == 1;
}

/* The next message field ``want`` of the graph ``g`` (skipping every other field): 1 and its
 * payload, 0 at the end, -1 on bytes not read exactly. */
static int next_item(Cursor *g, uint32_t want, Cursor *item) {
    uint32_t number;
    uint64_t value;
    int wire, r;
    while ((r = next_field(g, &number, &wire, item, &value)) == 1)
        if (number == want && wire == 2) return 1;
    return r;
}

/* The roles of a node's edge fields, in the order of nodefields.EDGE_FIELD_NAMES. */
enum { NOT_AN_EDGE, INPUT, OUTPUT, ATTRIBUTE, NAME, OP_TYPE, DOMAIN, ROLES };
#define MAX_EDGE_FIELD 64

/* role[number] of every edge field from its numbers (EDGE_FIELD_NUMBERS, one per role in role
 * order); 0 and a ValueError unless they are distinct and between 1 and MAX_EDGE_FIELD - 1. */
static int edge_roles(PyObject *numbers, unsigned char role[MAX_EDGE_FIELD]) {
    memset(role, NOT_AN_EDGE, MAX_EDGE_FIELD);
    if (PyTuple_GET_SIZE(numbers) != ROLES - 1) {
        PyErr_SetString(PyExc_ValueError, "scan_nodes: give the six edge field numbers");
        return 0;
    }
    for (Py_ssize_t k = 0; k < ROLES - 1; k++) {
        long number = PyLong_AsLong(PyTuple_GET_ITEM(numbers, k));
        if (number == -1 && PyErr_Occurred()) return 0;
        if (number < 1 || number >= MAX_EDGE_FIELD || role[number] != NOT_AN_EDGE) {
            PyErr_SetString(PyExc_ValueError, "scan_nodes: edge field numbers must be distinct "
                                              "and below 64");
            return 0;
        }
        role[number] = (unsigned char)(k + 1);
    }
    return 1;
}

/* scan_nodes(data, first, numbers) -> (preds, counts, names, ops, domains, multi, holders,
 * suspects) or None.
 *
 * ``numbers``: the field numbers of NodeProto's input, output, attribute, name, op_type and
 * domain (nodefields.EDGE_FIELD_NUMBERS); every other field of a node is skipped.
 *
 * The main graph's node loop of onnxsurgeon.validate._check_scope, on the serialized model:
 * for node i, every input's entry in ``first`` (None when absent) is appended to preds and the
 * number of inputs to counts; then each output is set in ``first`` to i unless already there
 * (a single output always, several only when non-empty); suspects is True when an output was
 * already there. names, ops and domains get the node's fields ("" when absent), multi the nodes
 * without exactly one output, holders the nodes with attributes.
 *
 * On None, ``first`` may hold keys added by the nodes read so far; the caller removes them. */
static PyObject *scan_nodes(PyObject *self, PyObject *args) {
    Py_buffer buf;
    PyObject *first, *numbers;
    unsigned char role[MAX_EDGE_FIELD];
    if (!PyArg_ParseTuple(args, "y*O!O!", &buf, &PyDict_Type, &first, &PyTuple_Type, &numbers))
        return NULL;
    if (!edge_roles(numbers, role)) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    PyObject *preds = PyList_New(0), *counts = PyList_New(0), *names = PyList_New(0);
    PyObject *ops = PyList_New(0), *domains = PyList_New(0), *multi = PyList_New(0);
    PyObject *holders = PyList_New(0), *empty = PyUnicode_FromStringAndSize("", 0);
    PyObject *result = NULL;
    TextCache op_cache = {0}, domain_cache = {0};
    Slot *slots = PyMem_Calloc(SLOTS, sizeof(Slot));
    int suspects = 0, bail = 0;
    if (slots == NULL) PyErr_NoMemory();
    if (!preds || !counts || !names || !ops || !domains || !multi || !holders || !empty ||
        !slots)
        goto done;
    Cursor g, node;
    if (!main_graph(&buf, &g)) {
        bail = 1;
        goto done;
    }
    uint32_t number;
    uint64_t value;
    int wire, r;
    Py_ssize_t i = 0;
    while ((r = next_item(&g, 1, &node)) == 1) {
        /* first pass over the node: inputs (looked up before any output of this node is set),
         * the singular texts (the last occurrence wins, as in protobuf), attributes, outputs */
        Cursor c = node, f, name = {NULL, NULL}, op = {NULL, NULL}, domain = {NULL, NULL};
        Py_ssize_t n_in = 0, n_out = 0;
        int has_attr = 0, rr;
        while ((rr = next_field(&c, &number, &wire, &f, &value)) == 1) {
            if (wire != 2 || number >= MAX_EDGE_FIELD) continue;
            switch (role[number]) {
            case INPUT: {
                PyObject *key = slot_text(slots, f);
                if (key == NULL) {
                    bail = 1;
                    goto done;
                }
                PyObject *pred = PyDict_GetItemWithError(first, key);
                Py_DECREF(key);
                if (pred == NULL && PyErr_Occurred()) goto done;
                if (PyList_Append(preds, pred ? pred : Py_None) < 0) goto done;
                n_in++;
                break;
            }
            case OUTPUT: n_out++; break;
            case NAME: name = f; break;
            case OP_TYPE: op = f; break;
            case ATTRIBUTE: has_attr = 1; break;
            case DOMAIN: domain = f; break;
            default: break;
            }
        }
        if (rr < 0) {
            bail = 1;
            goto done;
        }
        if (append_new(counts, PyLong_FromSsize_t(n_in)) < 0) goto done;
        if (append_text(names, name, NULL, empty, &bail) < 0 ||
            append_text(ops, op, &op_cache, empty, &bail) < 0 ||
            append_text(domains, domain, &domain_cache, empty, &bail) < 0)
            goto done;
        PyObject *index = PyLong_FromSsize_t(i);
        if (index == NULL) goto done;
        if (n_out != 1 && append_new(multi, (Py_INCREF(index), index)) < 0) {
            Py_DECREF(index);
            goto done;
        }
        if (has_attr && append_new(holders, (Py_INCREF(index), index)) < 0) {
            Py_DECREF(index);
            goto done;
        }
        /* second pass: the outputs */
        c = node;
        while (next_field(&c, &number, &wire, &f, &value) == 1) {
            if (wire != 2 || number >= MAX_EDGE_FIELD || role[number] != OUTPUT) continue;
            if (n_out != 1 && f.p == f.end) continue; /* an omitted optional output */
            PyObject *key = slot_text(slots, f);
            if (key == NULL) {
                Py_DECREF(index);
                bail = 1;
                goto done;
            }
            PyObject *was = PyDict_SetDefault(first, key, index);
            Py_DECREF(key);
            if (was == NULL) {
                Py_DECREF(index);
                goto done;
            }
            if (was != index) suspects = 1;
        }
        Py_DECREF(index);
        i++;
    }
    if (r < 0) {
        bail = 1;
        goto done;
    }
    result = Py_BuildValue("(OOOOOOOO)", preds, counts, names, ops, domains, multi, holders,
                           suspects ? Py_True : Py_False);
done:
    result = answer(result, bail);
    cache_clear(&op_cache);
    cache_clear(&domain_cache);
    slots_clear(slots);
    Py_XDECREF(preds);
    Py_XDECREF(counts);
    Py_XDECREF(names);
    Py_XDECREF(ops);
    Py_XDECREF(domains);
    Py_XDECREF(multi);
    Py_XDECREF(holders);
    Py_XDECREF(empty);
    PyBuffer_Release(&buf);
    return result;
}

/* scan_initializers(data) -> (names, types, check) or None.
 *
 * Every main-graph initializer's name and (data type, dims), in order, and the indexes, in
 * order, that the exact Python check must see: every tensor with a field besides dims,
 * data_type, name and raw_data (typed data, external data, a segment, a doc string, ...),
 * without raw_data or a name, and the first tensor of each (data type, dims, raw_data length).
 * A tensor like an earlier one in all three, with only those four fields, gets the same
 * verdict from the exact check (it reads nothing else), so it is not listed. */
#define GROUPS 64
#define MAX_DIMS 64
typedef struct {
    int64_t dtype;
    Cursor dims; /* the dims fields' bytes, as written, for comparison */
    uint64_t raw_len;
    PyObject *type;
} Group;

static PyObject *scan_initializers(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    PyObject *names = PyList_New(0), *types = PyList_New(0), *check = PyList_New(0);
    PyObject *result = NULL;
    Group groups[GROUPS];
    int n_groups = 0, bail = 0;
    PyObject *empty = PyUnicode_FromStringAndSize("", 0);
    if (!names || !types || !check || !empty) goto done;
    Cursor g, t;
    if (!main_graph(&buf, &g)) {
        bail = 1;
        goto done;
    }
    Py_ssize_t k = 0;
    int r;
    while ((r = next_item(&g, 5, &t)) == 1) {
        uint32_t number;
        uint64_t value;
        int wire;
        Cursor c = t, f, name = {NULL, NULL}, raw = {NULL, NULL};
        const uint8_t *dims_start = NULL, *dims_end = NULL;
        int64_t dtype = 0, dims[MAX_DIMS];
        int plain = 1, rr, dims_contiguous = 1, n_dims = 0;
        while (1) {
            const uint8_t *field_start = c.p;
            rr = next_field(&c, &number, &wire, &f, &value);
            if (rr != 1) break;
            if (number == 1 && (wire == 0 || wire == 2)) {
                if (dims_start == NULL) dims_start = field_start;
                else if (dims_end != field_start) dims_contiguous = 0;
                dims_end = c.p;
                /* one value (wire type 0), or every value of a packed field; more dims than
                 * any real tensor has, or a broken varint: the Python pass */
                int more = wire == 0;
                while (more || (wire == 2 && f.p < f.end)) {
                    if ((wire == 2 && !varint(&f, &value)) || n_dims == MAX_DIMS) {
                        bail = 1;
                        goto done;
                    }
                    dims[n_dims++] = (int64_t)value;
                    more = 0;
                }
            } else if (number == 2 && wire == 0) {
                dtype = (int64_t)(int32_t)(uint32_t)value;
            } else if (number == 8 && wire == 2) {
                name = f;
            } else if (number == 9 && wire == 2) {
                raw = f;
            } else {
                plain = 0;
            }
        }
        if (rr < 0) {
            bail = 1;
            goto done;
        }
        if (append_text(names, name, NULL, empty, &bail) < 0) goto done;
        if (raw.p == NULL || name.p == NULL || name.p == name.end || !dims_contiguous) plain = 0;
        /* the (data type, dims) tuple: shared with an earlier tensor written the same way */
        Cursor dims_bytes = {dims_start, dims_end};
        Py_ssize_t dims_n = dims_end - dims_start;
        uint64_t raw_len = raw.p ? (uint64_t)(raw.end - raw.p) : 0;
        PyObject *type = NULL;
        int group = -1;
        for (int j = 0; j < n_groups && dims_contiguous; j++) {
            Group *gr = &groups[j];
            if (gr->dtype == dtype && gr->dims.end - gr->dims.p == dims_n &&
                (dims_n == 0 || memcmp(gr->dims.p, dims_bytes.p, dims_n) == 0)) {
                type = gr->type;
                if (gr->raw_len == raw_len) {
                    group = j;
                    break;
                }
            }
        }
        if (type != NULL) {
            Py_INCREF(type);
        } else {
            PyObject *shape = PyTuple_New(n_dims);
            if (shape == NULL) goto done;
            for (int d = 0; d < n_dims; d++) {
                PyObject *dim = PyLong_FromLongLong((long long)dims[d]);
                if (dim == NULL) {
                    Py_DECREF(shape);
                    goto done;
                }
                PyTuple_SET_ITEM(shape, d, dim);
            }
            type = Py_BuildValue("(LN)", (long long)dtype, shape);
            if (type == NULL) goto done;
        }
        if (PyList_Append(types, type) < 0) {
            Py_DECREF(type);
            goto done;
        }
        if (plain && group < 0) {
            /* the first of its kind: checked exactly, then remembered */
            if (n_groups < GROUPS) {
                Group *gr = &groups[n_groups++];
                gr->dtype = dtype;
                gr->dims = dims_bytes;
                gr->raw_len = raw_len;
                Py_INCREF(type);
                gr->type = type;
            }
            plain = 0;
        }
        Py_DECREF(type);
        if (!plain && append_new(check, PyLong_FromSsize_t(k)) < 0) goto done;
        k++;
    }
    if (r < 0) {
        bail = 1;
        goto done;
    }
    result = Py_BuildValue("(OOO)", names, types, check);
done:
    result = answer(result, bail);
    for (int j = 0; j < n_groups; j++) Py_DECREF(groups[j].type);
    Py_XDECREF(empty);
    Py_XDECREF(names);
    Py_XDECREF(types);
    Py_XDECREF(check);
    PyBuffer_Release(&buf);
    return result;
}

/* scan_value_info(data) -> (names, types) or None.
 *
 * Every main-graph value_info entry's name ("" when absent; the last occurrence wins, as in
 * protobuf) and the bytes of its type field as written (b"" when absent), in order. Entries
 * whose type bytes are equal share one bytes object (a small cache: a typed model repeats a
 * few types). None when an entry gives its type twice (protobuf merges the two) or a name is
 * not UTF-8. Field numbers: GraphProto.value_info = 13; ValueInfoProto.name = 1, .type = 2. */
static PyObject *scan_value_info(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    PyObject *names = PyList_New(0), *types = PyList_New(0), *result = NULL;
    PyObject *empty = PyUnicode_FromStringAndSize("", 0);
    PyObject *no_type = PyBytes_FromStringAndSize("", 0);
    Cursor key[CACHE];
    PyObject *value[CACHE] = {NULL};
    int used = 0, next = 0, bail = 0, r;
    if (!names || !types || !empty || !no_type) goto done;
    Cursor g, entry;
    if (!main_graph(&buf, &g)) {
        bail = 1;
        goto done;
    }
    while ((r = next_item(&g, 13, &entry)) == 1) {
        Cursor c = entry, f, name = {NULL, NULL}, type = {NULL, NULL};
        uint32_t number;
        uint64_t v;
        int wire, rr, n_types = 0;
        while ((rr = next_field(&c, &number, &wire, &f, &v)) == 1) {
            if (wire != 2) continue;
            if (number == 1) name = f;
            else if (number == 2) {
                type = f;
                n_types++;
            }
        }
        if (rr < 0 || n_types > 1) {
            bail = 1;
            goto done;
        }
        if (append_text(names, name, NULL, empty, &bail) < 0) goto done;
        PyObject *item = no_type;
        if (type.p != NULL && type.p != type.end) {
            Py_ssize_t n = type.end - type.p;
            item = NULL;
            for (int k = 0; k < used; k++) {
                if (key[k].end - key[k].p == n && memcmp(key[k].p, type.p, n) == 0) {
                    item = value[k];
                    break;
                }
            }
            if (item == NULL) {
                item = PyBytes_FromStringAndSize((const char *)type.p, n);
                if (item == NULL) goto done;
                int slot = used < CACHE ? used++ : (next++ % CACHE);
                Py_XDECREF(value[slot]);
                key[slot] = type;
                value[slot] = item; /* the cache's reference */
            }
        }
        if (PyList_Append(types, item) < 0) goto done;
    }
    if (r < 0) {
        bail = 1;
        goto done;
    }
    result = Py_BuildValue("(OO)", names, types);
done:
    result = answer(result, bail);
    for (int k = 0; k < used; k++) Py_XDECREF(value[k]);
    Py_XDECREF(names);
    Py_XDECREF(types);
    Py_XDECREF(empty);
    Py_XDECREF(no_type);
    PyBuffer_Release(&buf);
    return result;
}

/* value_info_entries(data, keep) -> bytes or None.
 *
 * The main graph's value_info fields (tag, length and entry, as written) whose flag in
 * ``keep`` (one byte per entry, in order; nonzero: kept) is set, concatenated: what
 * GraphProto.MergeFromString appends as those entries. None when ``keep`` does not have one
 * flag per entry or the bytes are not read exactly. */
static PyObject *value_info_entries(PyObject *self, PyObject *args) {
    Py_buffer buf, keep;
    if (!PyArg_ParseTuple(args, "y*y*", &buf, &keep)) return NULL;
    PyObject *result = NULL;
    const uint8_t *flags = (const uint8_t *)keep.buf;
    Cursor g, c, f;
    size_t size = 0;
    Py_ssize_t k = 0;
    uint32_t number;
    uint64_t v;
    int wire, r = -1;
    if (main_graph(&buf, &g)) {
        /* first pass: the size of the kept fields, and one flag per entry */
        c = g;
        while (1) {
            const uint8_t *start = c.p;
            if ((r = next_field(&c, &number, &wire, &f, &v)) != 1) break;
            if (number != 13 || wire != 2) continue;
            if (k < keep.len && flags[k]) size += (size_t)(c.p - start);
            k++;
        }
    }
    if (r < 0 || k != keep.len) {
        Py_INCREF(Py_None);
        result = Py_None;
    } else if ((result = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)size)) != NULL) {
        uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
        c = g;
        k = 0;
        while (1) {
            const uint8_t *start = c.p;
            if (next_field(&c, &number, &wire, &f, &v) != 1) break;
            if (number != 13 || wire != 2) continue;
            if (flags[k++]) {
                memcpy(out, start, (size_t)(c.p - start));
                out += c.p - start;
            }
        }
    }
    PyBuffer_Release(&buf);
    PyBuffer_Release(&keep);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_nodes", scan_nodes, METH_VARARGS, "The main graph's node pass (see scan.py)."},
    {"scan_initializers", scan_initializers, METH_VARARGS,
     "The main graph's initializer pass (see scan.py)."},
    {"scan_value_info", scan_value_info, METH_VARARGS,
     "The main graph's value_info names and type bytes (see scan.py)."},
    {"value_info_entries", value_info_entries, METH_VARARGS,
     "The main graph's kept value_info fields, as written (see scan.py)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_scan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__scan(void) { return PyModule_Create(&module); }
