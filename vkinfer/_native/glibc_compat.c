/* Linked into _vkcore beside the static libstdc++ (CMakeLists.txt): libstdc++.a's std::random_device (pulled in
 * by its string instantiations, never called by vkinfer) refers to arc4random, which glibc has only since 2.36;
 * that one reference made the wheel manylinux_2_36 (Debian 12 and newer only). This hidden definition satisfies
 * it inside the module with getrandom (glibc 2.25), and the wheel stays manylinux_2_34 (Debian 12, Ubuntu 22.04,
 * RHEL 9). Hidden: it never interposes the process's own arc4random. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/random.h>

__attribute__((visibility("hidden"))) uint32_t arc4random(void)
{
    uint32_t v = 0;
    unsigned char* p = (unsigned char*)&v;
    size_t got = 0;
    while (got < sizeof v) {
        ssize_t n = getrandom(p + got, sizeof v - got, 0);
        if (n > 0) got += (size_t)n;
        else if (errno != EINTR) break;
    }
    return v;
}
