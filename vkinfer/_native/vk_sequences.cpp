// Command sequences: recorded once, replayed with one submit per run.
//
// Why not kp::Sequence: it creates and destroys a fence per submit and writes a timestamp after every op without
// resetting its query pool first (a validation error). Our Sequence keeps one fence, records its ops on the first
// run (so pipelines still compiling in the background are only waited for then), and keeps a second command
// buffer bracketed by two timestamps for Sequence.run(timed=True), recorded on the first timed run: on lavapipe
// the timestamps add about 45 us to every submit (95 vs 50 us for one small dispatch), too much to pay on
// untimed runs.
#include "vk_core.hpp"

#include <cstring>
#include <stdexcept>

namespace vki {

namespace {

// All earlier transfer/shader writes available and visible to all later transfers, shaders and host
// reads: one global barrier (cheaper to record than per-buffer ones and as fast on every driver we ran).
void global_barrier(const vk::CommandBuffer& cb)
{
    vk::MemoryBarrier mb(vk::AccessFlagBits::eTransferWrite | vk::AccessFlagBits::eShaderWrite,
                         vk::AccessFlagBits::eTransferRead | vk::AccessFlagBits::eTransferWrite |
                           vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite |
                           vk::AccessFlagBits::eHostRead);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer | vk::PipelineStageFlagBits::eComputeShader,
                       vk::PipelineStageFlagBits::eTransfer | vk::PipelineStageFlagBits::eComputeShader |
                         vk::PipelineStageFlagBits::eHost,
                       vk::DependencyFlags(), 1, &mb, 0, nullptr, 0, nullptr);
}

// Device writes -> host reads. A fence wait alone does not make device writes visible to the host: the
// writes must be made available to the host domain by a barrier whose destination is HOST / HOST_READ.
void host_read_barrier(const vk::CommandBuffer& cb)
{
    vk::MemoryBarrier mb(vk::AccessFlagBits::eTransferWrite | vk::AccessFlagBits::eShaderWrite,
                         vk::AccessFlagBits::eHostRead);
    cb.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer | vk::PipelineStageFlagBits::eComputeShader,
                       vk::PipelineStageFlagBits::eHost, vk::DependencyFlags(), 1, &mb, 0, nullptr, 0, nullptr);
}

} // namespace

Sequence::Sequence(std::shared_ptr<vk::Device> d, std::shared_ptr<std::atomic<bool>> lost_, vk::Queue q,
                   uint32_t family, uint32_t ts_bits, float period)
  : dev(std::move(d)), lost(std::move(lost_)), queue(q)
{
    try {
        pool = dev->createCommandPool(vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlags(), family));
        auto cb = dev->allocateCommandBuffers(vk::CommandBufferAllocateInfo(pool, vk::CommandBufferLevel::ePrimary, 2));
        cbs[0] = cb[0];
        cbs[1] = cb[1];
        fence = dev->createFence(vk::FenceCreateInfo());
        if (ts_bits > 0) {
            queries = dev->createQueryPool(
              vk::QueryPoolCreateInfo(vk::QueryPoolCreateFlags(), vk::QueryType::eTimestamp, 2));
            period_ns = period;
            ts_mask = ts_bits >= 64 ? ~0ull : ((1ull << ts_bits) - 1);
        }
    } catch (const vk::SystemError& e) { // out of memory: release what was made (no destructor runs)
        destroy();
        fail_system(e, "creating a command sequence", lost.get());
    }
}

void Sequence::destroy()
{
    if (in_flight && fence) // a wait that failed or timed out: let the work end before its objects go
        (void)dev->waitForFences(1, &fence, VK_TRUE, fence_timeout_ns());
    if (queries) dev->destroyQueryPool(queries);
    if (fence) dev->destroyFence(fence);
    if (pool) {
        if (cbs[0]) dev->freeCommandBuffers(pool, 2, cbs); // implied by destroying the pool; explicit for clarity
        dev->destroyCommandPool(pool);
    }
    queries = nullptr;
    fence = nullptr;
    pool = nullptr;
}

Sequence::~Sequence() { destroy(); }

void Sequence::add(SeqOp op)
{
    if (recorded) throw std::runtime_error("this sequence has already run: record every command before the first run()");
    if (op.kind != SeqOp::Barrier) commands = true;
    ops.push_back(std::move(op));
}

void Sequence::upload(const std::vector<Buffer*>& bs)
{
    SeqOp op{ SeqOp::Upload, {}, nullptr };
    for (auto* b : bs) {
        if (!b->host_visible()) throw std::invalid_argument("upload/download needs a buffer made with staged=True");
        // Direct (host-visible, device-local) memory: the host's writes before vkQueueSubmit are made
        // visible to the device by the submission itself; there is nothing to copy.
        if (!b->direct()) op.ts.push_back(b->t);
    }
    if (!op.ts.empty()) add(std::move(op));
}

void Sequence::download(const std::vector<Buffer*>& bs)
{
    SeqOp op{ SeqOp::Download, {}, nullptr };
    bool direct = false;
    for (auto* b : bs) {
        if (!b->host_visible()) throw std::invalid_argument("upload/download needs a buffer made with staged=True");
        if (b->direct())
            direct = true;
        else
            op.ts.push_back(b->t);
    }
    const size_t copies = op.ts.size();
    if (copies) {
        // Copies read what earlier shaders wrote: order them, then make the copies host-visible.
        add(SeqOp{ SeqOp::Barrier, {}, nullptr });
        add(std::move(op));
    }
    // Copies or shader writes of direct memory -> host reads after the fence wait.
    if (direct || copies) add(SeqOp{ SeqOp::HostRead, {}, nullptr });
}

void Sequence::record(const vk::CommandBuffer& cb, bool timed)
{
    cb.begin(vk::CommandBufferBeginInfo());
    if (timed) {
        cb.resetQueryPool(queries, 0, 2);
        cb.writeTimestamp(vk::PipelineStageFlagBits::eTopOfPipe, queries, 0);
    }
    for (auto& op : ops) {
        switch (op.kind) {
            case SeqOp::Upload:
                for (auto& t : op.ts) t->recordCopyFromStagingToDevice(cb);
                break;
            case SeqOp::Download:
                for (auto& t : op.ts) t->recordCopyFromDeviceToStaging(cb);
                break;
            case SeqOp::HostRead: host_read_barrier(cb); break;
            case SeqOp::Dispatch: op.prog->record(cb); break;
            case SeqOp::Barrier: global_barrier(cb); break;
        }
    }
    if (timed) cb.writeTimestamp(vk::PipelineStageFlagBits::eBottomOfPipe, queries, 1);
    cb.end();
}

std::optional<uint64_t> Sequence::run_nogil(bool timed)
{
    check_lost(lost.get());
    if (!commands) {
        // Only global barriers (e.g. an upload of direct memory followed by a barrier): every earlier
        // submit was waited for, and every sequence starts with its own barrier, so there is nothing
        // to order. Skipping the submit saves 30-60 us per constant upload on lavapipe.
        recorded = true;
        if (timed && queries) return 0;
        return std::nullopt;
    }
    const bool use_ts = timed && queries;
    recorded = true; // no more ops: they would be missing from the command buffer recorded here
    if (!recorded_cb[use_ts]) {
        try {
            record(cbs[use_ts], use_ts); // waits here for pipelines still being created
        } catch (const vk::SystemError& e) { // vkBeginCommandBuffer / vkEndCommandBuffer out of memory
            (void)vkResetCommandPool(static_cast<VkDevice>(*dev), static_cast<VkCommandPool>(pool), 0);
            recorded_cb[0] = recorded_cb[1] = false;
            fail_system(e, "recording the command buffer", lost.get());
        } catch (...) { // both buffers back to the initial state: a later run retries
            (void)vkResetCommandPool(static_cast<VkDevice>(*dev), static_cast<VkCommandPool>(pool), 0);
            recorded_cb[0] = recorded_cb[1] = false;
            throw;
        }
        recorded_cb[use_ts] = true;
    }
    vk::SubmitInfo si(0, nullptr, nullptr, 1, &cbs[use_ts]);
    vk::Result r = injected(FAULT_SUBMIT); // the test hook (vk_faults.cpp): an injected fault submits nothing
    if (r == vk::Result::eSuccess) r = queue.submit(1, &si, fence);
    if (r != vk::Result::eSuccess) fail(r, "vkQueueSubmit", lost.get());
    in_flight = true;
    // Never an unbounded wait: a device that does not finish within the timeout is taken as lost (a hang).
    r = dev->waitForFences(1, &fence, VK_TRUE, fence_timeout_ns());
    if (r == vk::Result::eSuccess) {
        in_flight = false;
        r = dev->resetFences(1, &fence);
        if (r != vk::Result::eSuccess) fail(r, "vkResetFences", lost.get());
    }
    if (vk::Result inj = injected(FAULT_WAIT); inj != vk::Result::eSuccess) r = inj; // after the real wait
    if (r != vk::Result::eSuccess) fail(r, "vkWaitForFences", lost.get());
    if (!use_ts) return std::nullopt;
    uint64_t ts[2] = { 0, 0 };
    r = dev->getQueryPoolResults(queries, 0, 2, sizeof ts, ts, sizeof(uint64_t),
                                 vk::QueryResultFlagBits::e64 | vk::QueryResultFlagBits::eWait);
    if (r != vk::Result::eSuccess) fail(r, "vkGetQueryPoolResults", lost.get());
    uint64_t ticks = (ts[1] - ts[0]) & ts_mask;
    return (uint64_t)((double)ticks * period_ns + 0.5);
}

std::optional<uint64_t> Sequence::run(bool timed)
{
    py::gil_scoped_release nogil;
    return run_nogil(timed);
}

// One inference of a segment in one call: pack the inputs into their buffers, submit, wait, unpack the
// outputs, with no Python between the fence wait and the unpacking (output arrays are allocated first).
// On lavapipe the device's work evicts the interpreter from the CPU caches: a Python-level unpack of
// MobileNetV2's 1000 logits took 67-90 us right after the wait against 3.8 us warm.
//   ins:  [(buffer, array, nchw, flip)]; outs: [(buffer, shape, dtype, nchw, flip)]
//   -> (output arrays, device ns or None)
py::tuple Sequence::run_io(const py::list& ins, const py::list& outs, bool timed)
{
    std::vector<Buffer::PackJob> packs;
    std::vector<Buffer::UnpackJob> unpacks;
    packs.reserve(ins.size());
    unpacks.reserve(outs.size());
    for (const auto& item : ins) {
        auto t = item.cast<py::tuple>();
        if (t.size() != 4) throw std::invalid_argument("run_io: inputs are (buffer, array, nchw, flip)");
        packs.push_back(t[0].cast<Buffer&>().prepare_write(t[1], t[2].cast<bool>(), t[3].cast<uint8_t>()));
    }
    for (const auto& item : outs) {
        auto t = item.cast<py::tuple>();
        if (t.size() != 5) throw std::invalid_argument("run_io: outputs are (buffer, shape, dtype, nchw, flip)");
        unpacks.push_back(t[0].cast<Buffer&>().prepare_read(t[1].cast<std::vector<py::ssize_t>>(), t[2],
                                                             t[3].cast<bool>(), t[4].cast<uint8_t>()));
    }
    std::optional<uint64_t> ns;
    {
        py::gil_scoped_release nogil;
        for (const auto& j : packs) j.run();
        ns = run_nogil(timed);
        for (const auto& j : unpacks) j.run();
    }
    py::list res;
    for (auto& j : unpacks) res.append(j.out);
    return py::make_tuple(res, ns ? py::object(py::int_(*ns)) : py::object(py::none()));
}

// --- the plan runner's sequences (vk_api.h) ----------------------------------------------------------------

namespace {

void copy_message(const char* what, char* err, size_t errlen)
{
    if (!errlen) return;
    std::strncpy(err, what, errlen - 1);
    err[errlen - 1] = '\0';
}

vki_vk_seq* api_sequence(PyObject* seq)
{
    try {
        return reinterpret_cast<vki_vk_seq*>(&py::handle(seq).cast<Sequence&>());
    } catch (...) {
        set_python_error();
        return nullptr;
    }
}

int api_run(vki_vk_seq* s, int timed, uint64_t* ns, char* err, size_t errlen)
{
    try {
        auto r = reinterpret_cast<Sequence*>(s)->run_nogil(timed != 0);
        if (!r) return 0;
        *ns = *r;
        return 1;
    } catch (const VkFault& e) {
        copy_message(e.what(), err, errlen);
        return e.lost() ? -2 : -3;
    } catch (const std::exception& e) {
        copy_message(e.what(), err, errlen);
    } catch (...) {
        copy_message("unknown C++ exception", err, errlen);
    }
    return -1;
}

} // namespace

void fill_sequence_api(vki_vk_api& api)
{
    api.sequence = api_sequence;
    api.run = api_run;
}

} // namespace vki
