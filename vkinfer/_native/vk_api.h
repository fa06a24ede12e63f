/* The C function table that vkinfer._vkcore exports in a PyCapsule (VKI_VK_API_CAPSULE) for the plan runner
 * vkinfer._planrun (planrun.c). The runner links neither Kompute nor Vulkan: a plan's Vulkan steps (pack the
 * inputs into their buffers, submit and wait, unpack the outputs) go through these functions, and a CPU-only
 * install, or a plan with CPU steps only, never loads _vkcore (nor libvulkan.so.1).
 *
 * Functions marked GIL are called with the GIL held and report failure as NULL with a Python exception set
 * (ValueError for a tensor that does not fit its buffer, TypeError for an object of the wrong type); the others
 * are called without the GIL and never raise. */
#ifndef VKI_VK_API_H
#define VKI_VK_API_H

#include <Python.h>
#include <stddef.h>
#include <stdint.h>

#define VKI_VK_API_CAPSULE "vkinfer._vkcore._C_API"
#define VKI_VK_API_VERSION 1u

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vki_vk_move vki_vk_move; /* host bytes <-> a device buffer in the packed form */
typedef struct vki_vk_seq vki_vk_seq;   /* a recorded command sequence (a _vkcore.Sequence) */

typedef struct vki_vk_api {
    unsigned version; /* VKI_VK_API_VERSION */
    /* GIL. A move between a host tensor of `shape` (a sequence of ints) and `buffer` (a _vkcore.Buffer with
     * host-visible memory) in the packed form: `nchw` as Buffer.write_nchw / read_nchw, else rows of the last
     * axis with every byte XORed with `flip`; `read`: buffer -> host (unpack), else host -> buffer (pack). */
    vki_vk_move* (*move_new)(PyObject* buffer, PyObject* shape, int nchw, int flip, int read);
    void (*move_free)(vki_vk_move* m);
    /* The host tensor's size in bytes. */
    size_t (*move_bytes)(const vki_vk_move* m);
    /* The buffer's host memory where the move is a plain copy (rows already whole words, no XOR), else NULL. */
    uint8_t* (*move_plain)(const vki_vk_move* m);
    void (*pack)(const vki_vk_move* m, const uint8_t* src);
    void (*unpack)(const vki_vk_move* m, uint8_t* dst);
    /* GIL. The native sequence of a _vkcore.Sequence (valid while that object lives). */
    vki_vk_seq* (*sequence)(PyObject* seq);
    /* Submit the sequence once and wait for it (the caller holds its device's lock). Returns 1 with the device
     * time in *ns (`timed` and the queue has timestamps), 0 without, -1 on failure with the message in err: -2
     * when the device is lost (or the wait timed out), -3 when out of device or host memory. */
    int (*run)(vki_vk_seq* s, int timed, uint64_t* ns, char* err, size_t errlen);
} vki_vk_api;

#ifdef __cplusplus
}
#endif

#endif
