// Buffers (Kompute's kp::Tensor) and the packed form's packers between host arrays and device memory.
//
// The packed form is defined once, in vkinfer/layout.py (the numpy converters there are the reference these
// packers are tested against, tests/vulkan/test_vk_runtime.py): rows of 8-bit values padded to whole 32-bit words, 4
// little-endian values per word (value 4i+j is byte j of word i). Its parameters reach this file from there
// (layout.packed_form(), handed over by vkinfer._vk when it loads this module): the pad byte, and per rank the
// storage order that packs as pixel rows of channels (4-D NCHW as N*H*W rows of C, 5-D (N, A, B, H, W) as
// N*H*W rows of A*B); any other rank packs as rows of its last axis. The word itself (4 values in a uint32_t)
// is what the code below is written for: a table that says otherwise is refused.
#include "vk_core.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace vki {

namespace {

constexpr int kWordValues = 4; // 8-bit values per 32-bit word

struct PackedForm {
    bool set = false;
    uint8_t pad = 0;
    std::map<size_t, std::pair<size_t, size_t>> pixel; // rank -> (first channel axis, first pixel axis)
};
PackedForm g_form;

std::string perm_str(const std::vector<size_t>& p)
{
    std::string s = "(";
    for (size_t i = 0; i < p.size(); i++) s += (i ? ", " : "") + std::to_string(p[i]);
    return s + ")";
}

} // namespace

void set_packed_form(const py::dict& table)
{
    PackedForm f;
    const int words = table["word_values"].cast<int>();
    if (words != kWordValues)
        throw std::invalid_argument("packed form: the native packers store " + std::to_string(kWordValues) +
                                    " values per 32-bit word, vkinfer.layout says " + std::to_string(words));
    const int pad = table["pad_byte"].cast<int>();
    if (pad < 0 || pad > 255) throw std::invalid_argument("packed form: pad_byte must be a byte");
    f.pad = (uint8_t)pad;
    for (auto item : table["orders"].cast<py::dict>()) {
        const size_t r = item.first.cast<size_t>();
        const auto perm = item.second.cast<std::vector<size_t>>();
        if (perm.size() != r)
            throw std::invalid_argument("packed form: rank " + std::to_string(r) + "'s order " + perm_str(perm) +
                                        " has " + std::to_string(perm.size()) + " axes");
        // The storage order of a pixel-row form: batch axes [0, b), then pixel axes [p, r), then channel axes
        // [b, p), each group in its own order. The identity stores rows of the last axis.
        size_t b = 0;
        while (b < r && perm[b] == b) b++;
        if (b == r) continue;
        const size_t p = perm[b], np = r - p;
        bool ok = p > b && p < r;
        for (size_t i = b; ok && i < r; i++) ok = perm[i] == (i < b + np ? p + (i - b) : b + (i - b - np));
        if (!ok)
            throw std::invalid_argument("packed form: rank " + std::to_string(r) + "'s order " + perm_str(perm) +
                                        " is not batch axes, pixel axes, then channel axes");
        f.pixel[r] = { b, p };
    }
    f.set = true;
    g_form = f;
}

size_t mul_checked(size_t a, size_t b)
{
    if (a != 0 && b > SIZE_MAX / a) throw std::invalid_argument("tensor too large");
    return a * b;
}

Form form_of(const std::vector<py::ssize_t>& shape, bool pixel_rows)
{
    if (!g_form.set)
        throw std::runtime_error("internal: the packed form's parameters are not set (vkinfer._vk hands "
                                 "vkinfer.layout.packed_form() to _vkcore.set_packed_form when it loads it)");
    for (auto s : shape)
        if (s < 0) throw std::invalid_argument("negative dimension in shape");
    auto prod = [&shape](size_t from, size_t to) {
        size_t n = 1;
        for (size_t i = from; i < to; i++) n = mul_checked(n, (size_t)shape[i]);
        return n;
    };
    Form f;
    const size_t r = shape.size();
    if (pixel_rows) {
        auto it = g_form.pixel.find(r);
        if (it != g_form.pixel.end()) {
            const auto [b, p] = it->second;
            f.nchw = true;
            f.n = prod(0, b);
            f.c = prod(b, p);
            f.hw = prod(p, r);
            mul_checked(mul_checked(f.n, f.hw), f.c);
            return f;
        }
    }
    if (r == 0) return f; // a scalar: one row of one value
    f.c = (size_t)shape[r - 1];
    f.n = prod(0, r - 1);
    return f;
}

size_t packed_bytes(const Form& f) { return mul_checked(mul_checked(f.rows(), f.words_per_row()), 4); }

namespace {

// The pad byte in the bytes of a word from byte `have` on (0 < have < 4).
uint32_t pad_above(size_t have) { return (g_form.pad * 0x01010101u) & ~((1u << (8 * have)) - 1); }

// Pixels per block: a block's packed words (block * words_per_row) are assembled in a local buffer and
// written out with one memcpy, so device memory sees sequential full-word stores (write-combined host
// memory on some GPUs punishes scattered ones) and the planes are read in 64-byte runs.
size_t block_pixels(size_t wpr) { return std::max<size_t>(1, std::min<size_t>(64, 16384 / std::max<size_t>(wpr, 1))); }

void pack_nchw(const uint8_t* src, uint32_t* dst, const Form& f)
{
    const size_t c = f.c, hw = f.hw, wpr = f.words_per_row();
    if (wpr == 0) return;
    const size_t pb = block_pixels(wpr);
    std::vector<uint32_t> tmp(pb * wpr);
    for (size_t n = 0; n < f.n; n++) {
        const uint8_t* s = src + n * c * hw;
        uint32_t* d = dst + n * hw * wpr;
        for (size_t p0 = 0; p0 < hw; p0 += pb) {
            const size_t np = std::min(pb, hw - p0);
            for (size_t w = 0; w < wpr; w++) {
                const size_t ch = 4 * w;
                const uint8_t* s0 = s + ch * hw + p0;
                const size_t have = std::min<size_t>(4, c - ch);
                uint32_t* t = tmp.data() + w;
                if (have == 4) {
                    const uint8_t *s1 = s0 + hw, *s2 = s1 + hw, *s3 = s2 + hw;
                    for (size_t p = 0; p < np; p++)
                        t[p * wpr] = (uint32_t)s0[p] | (uint32_t)s1[p] << 8 | (uint32_t)s2[p] << 16 |
                                     (uint32_t)s3[p] << 24;
                } else {
                    const uint32_t pad = pad_above(have);
                    for (size_t p = 0; p < np; p++) {
                        uint32_t v = pad;
                        for (size_t j = 0; j < have; j++) v |= (uint32_t)s0[j * hw + p] << (8 * j);
                        t[p * wpr] = v;
                    }
                }
            }
            std::memcpy(d + p0 * wpr, tmp.data(), np * wpr * 4);
        }
    }
}

void unpack_nchw(const uint32_t* src, uint8_t* dst, const Form& f)
{
    const size_t c = f.c, hw = f.hw, wpr = f.words_per_row();
    if (wpr == 0) return;
    const size_t pb = block_pixels(wpr);
    std::vector<uint32_t> tmp(pb * wpr);
    for (size_t n = 0; n < f.n; n++) {
        const uint32_t* s = src + n * hw * wpr;
        uint8_t* d = dst + n * c * hw;
        for (size_t p0 = 0; p0 < hw; p0 += pb) {
            const size_t np = std::min(pb, hw - p0);
            std::memcpy(tmp.data(), s + p0 * wpr, np * wpr * 4); // one sequential read of device memory
            for (size_t w = 0; w < wpr; w++) { // each word read once, its bytes to up to 4 planes
                const uint32_t* t = tmp.data() + w;
                const size_t ch = 4 * w, have = std::min<size_t>(4, c - ch);
                uint8_t* o0 = d + ch * hw + p0;
                if (have == 4) {
                    uint8_t *o1 = o0 + hw, *o2 = o1 + hw, *o3 = o2 + hw;
                    for (size_t p = 0; p < np; p++) {
                        const uint32_t v = t[p * wpr];
                        o0[p] = (uint8_t)v;
                        o1[p] = (uint8_t)(v >> 8);
                        o2[p] = (uint8_t)(v >> 16);
                        o3[p] = (uint8_t)(v >> 24);
                    }
                } else {
                    for (size_t j = 0; j < have; j++)
                        for (size_t p = 0; p < np; p++) o0[j * hw + p] = (uint8_t)(t[p * wpr] >> (8 * j));
                }
            }
        }
    }
}

// Rows of `width` bytes into rows of whole words (padded), XORing every byte with `flip` (0x80 turns the CPU
// graph's canonical int8 bytes into raw int8 and back). Narrow rows, an RGB image's 3 bytes per pixel above all,
// take a word per row: a memcpy + memset per row cost 10x that (3 -> 4 bytes per pixel of a 224x224 input).
void pack_rows(const uint8_t* src, uint8_t* dst, const Form& f, uint8_t flip)
{
    const size_t width = f.c, stride = 4 * f.words_per_row();
    if (width == stride && !flip) {
        std::memcpy(dst, src, f.n * width);
        return;
    }
    if (stride == 4) { // 1-4 bytes per row
        const uint32_t fl = flip * 0x01010101u & (width == 4 ? 0xFFFFFFFFu : (1u << (8 * width)) - 1);
        const uint32_t pad = width == 4 ? 0u : pad_above(width);
        uint32_t* d = reinterpret_cast<uint32_t*>(dst);
        for (size_t r = 0; r < f.n; r++) {
            const uint8_t* s = src + r * width;
            uint32_t v = s[0];
            if (width > 1) v |= (uint32_t)s[1] << 8;
            if (width > 2) v |= (uint32_t)s[2] << 16;
            if (width > 3) v |= (uint32_t)s[3] << 24;
            d[r] = (v ^ fl) | pad;
        }
        return;
    }
    for (size_t r = 0; r < f.n; r++) {
        uint8_t* d = dst + r * stride;
        const uint8_t* s = src + r * width;
        for (size_t k = 0; k < width; k++) d[k] = s[k] ^ flip;
        std::memset(d + width, g_form.pad, stride - width);
    }
}

void unpack_rows(const uint8_t* src, uint8_t* dst, const Form& f, uint8_t flip)
{
    const size_t width = f.c, stride = 4 * f.words_per_row();
    if (width == stride && !flip) {
        std::memcpy(dst, src, f.n * width);
        return;
    }
    for (size_t r = 0; r < f.n; r++) {
        const uint8_t* s = src + r * stride;
        uint8_t* d = dst + r * width;
        for (size_t k = 0; k < width; k++) d[k] = s[k] ^ flip;
    }
}

} // namespace

void pack_form(const uint8_t* src, uint8_t* dst, const Form& f, uint8_t flip)
{
    if (f.nchw)
        pack_nchw(src, reinterpret_cast<uint32_t*>(dst), f);
    else
        pack_rows(src, dst, f, flip);
}

void unpack_form(const uint8_t* src, uint8_t* dst, const Form& f, uint8_t flip)
{
    if (f.nchw)
        unpack_nchw(reinterpret_cast<const uint32_t*>(src), dst, f);
    else
        unpack_rows(src, dst, f, flip);
}

// Through Python attributes and the buffer protocol only: pybind11 2.10's dtype accessors (kind(),
// itemsize()) read numpy 1.x's descriptor layout and return garbage under numpy 2.
void check_8bit(const py::object& dtype, const char* what)
{
    std::string kind = py::str(dtype.attr("kind"));
    if ((kind != "u" && kind != "i") || dtype.attr("itemsize").cast<int>() != 1)
        throw py::type_error(std::string(what) + " must be uint8 or int8, got " + std::string(py::str(dtype)));
}

// --- buffers -----------------------------------------------------------------------------------------------

std::string Buffer::kind() const
{
    switch (t->tensorType()) {
        case kp::Tensor::TensorTypes::eDevice: return "staged";
        case kp::Tensor::TensorTypes::eHost: return "direct";
        default: return "device";
    }
}

uint8_t* Buffer::host() const
{
    if (!host_visible()) throw std::invalid_argument("buffer has no host-visible memory (made with staged=False)");
    return static_cast<uint8_t*>(t->rawData());
}

void Buffer::write(py::buffer b, size_t offset)
{
    py::buffer_info info = b.request();
    size_t n = (size_t)info.size * (size_t)info.itemsize;
    uint8_t* h = host();
    if (!PyBuffer_IsContiguous(info.view(), 'C')) throw std::invalid_argument("write needs a C-contiguous buffer");
    if (offset > nbytes || n > nbytes - offset)
        throw std::invalid_argument("write of " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                                    " overflows a " + std::to_string(nbytes) + "-byte buffer");
    std::memcpy(h + offset, info.ptr, n);
}

void Buffer::read_into(py::buffer b, size_t offset)
{
    py::buffer_info info = b.request(true);
    size_t n = (size_t)info.size * (size_t)info.itemsize;
    uint8_t* h = host();
    if (!PyBuffer_IsContiguous(info.view(), 'C'))
        throw std::invalid_argument("read_into needs a C-contiguous writable buffer");
    if (offset > nbytes || n > nbytes - offset) throw std::invalid_argument("read past the end of the buffer");
    std::memcpy(info.ptr, h + offset, n);
}

void Buffer::check_fits(const Form& f, const char* what) const
{
    size_t need = packed_bytes(f);
    if (need > nbytes)
        throw std::invalid_argument(std::string(what) + ": the packed tensor takes " + std::to_string(need) +
                                    " bytes, the buffer has " + std::to_string(nbytes));
}

Buffer::PackJob Buffer::prepare_write(const py::object& x, bool nchw, uint8_t flip)
{
    if (!py::hasattr(x, "dtype") || !PyObject_CheckBuffer(x.ptr())) throw py::type_error("packing needs a numpy array");
    check_8bit(x.attr("dtype"), "write_nchw/write_rows data");
    PackJob j;
    j.keep = py::reinterpret_borrow<py::buffer>(x).request();
    if (!PyBuffer_IsContiguous(j.keep.view(), 'C')) throw std::invalid_argument("packing needs a C-contiguous array");
    j.f = form_of(j.keep.shape, nchw);
    check_fits(j.f, "write");
    j.h = host();
    j.src = static_cast<const uint8_t*>(j.keep.ptr);
    j.flip = flip;
    return j;
}

Buffer::UnpackJob Buffer::prepare_read(const std::vector<py::ssize_t>& shape, const py::object& dtype, bool nchw,
                                       uint8_t flip)
{
    py::module_ np = py::module_::import("numpy");
    py::object dt = np.attr("dtype")(dtype);
    check_8bit(dt, "dtype");
    UnpackJob j;
    j.f = form_of(shape, nchw);
    check_fits(j.f, "read");
    j.h = host();
    j.out = np.attr("empty")(py::tuple(py::cast(shape)), dt);
    j.keep = py::reinterpret_borrow<py::buffer>(j.out).request(true);
    j.dst = static_cast<uint8_t*>(j.keep.ptr);
    j.flip = flip;
    return j;
}

void Buffer::write_packed(const py::object& x, bool nchw, uint8_t flip)
{
    PackJob j = prepare_write(x, nchw, flip);
    py::gil_scoped_release nogil;
    j.run();
}

py::object Buffer::read_packed(const std::vector<py::ssize_t>& shape, const py::object& dtype, bool nchw, uint8_t flip)
{
    UnpackJob j = prepare_read(shape, dtype, nchw, flip);
    {
        py::gil_scoped_release nogil;
        j.run();
    }
    return j.out;
}

} // namespace vki

// --- the plan runner's moves (vk_api.h) -------------------------------------------------------------------------

struct vki_vk_move {
    std::shared_ptr<kp::Tensor> t; // the buffer's memory stays mapped while the move lives
    uint8_t* host = nullptr;
    vki::Form f;
    uint8_t flip = 0;
};

namespace vki {

namespace {

vki_vk_move* move_new(PyObject* buffer, PyObject* shape, int nchw, int flip, int read)
{
    try {
        Buffer& b = py::handle(buffer).cast<Buffer&>();
        if (flip < 0 || flip > 255) throw std::invalid_argument("flip must be a byte, got " + std::to_string(flip));
        Form f = form_of(py::handle(shape).cast<std::vector<py::ssize_t>>(), nchw != 0);
        b.check_fits(f, read ? "read" : "write");
        auto m = std::make_unique<vki_vk_move>();
        m->host = b.host(); // throws for a buffer without host-visible memory
        m->t = b.t;
        m->f = f;
        m->flip = (uint8_t)flip;
        return m.release();
    } catch (...) {
        set_python_error();
        return nullptr;
    }
}

void move_free(vki_vk_move* m) { delete m; }

size_t move_bytes(const vki_vk_move* m) { return m->f.n * m->f.c * m->f.hw; }

uint8_t* move_plain(const vki_vk_move* m)
{
    const Form& f = m->f;
    return !f.nchw && m->flip == 0 && f.c == 4 * f.words_per_row() ? m->host : nullptr;
}

void move_pack(const vki_vk_move* m, const uint8_t* src) { pack_form(src, m->host, m->f, m->flip); }

void move_unpack(const vki_vk_move* m, uint8_t* dst) { unpack_form(m->host, dst, m->f, m->flip); }

} // namespace

void fill_move_api(vki_vk_api& api)
{
    api.move_new = move_new;
    api.move_free = move_free;
    api.move_bytes = move_bytes;
    api.move_plain = move_plain;
    api.pack = move_pack;
    api.unpack = move_unpack;
}

} // namespace vki
