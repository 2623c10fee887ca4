// jemalloc's options, for the binaries linked with it (CMakeLists.txt, sluice_link_jemalloc).
//
// background_thread: jemalloc returns freed pages to the system from a thread of its own, once
// they have been unused for its decay time (10 s). Without it, decay advances only when the
// arena that owns the pages allocates again, so the pages of a thread that went quiet stayed
// resident: with the API's handlers on threads of their own, the node lists they built during
// an enrolment kept 10-15 KiB more RSS per agent in bench/swarm (docs/benchmarks.md). jemalloc
// creates that thread with every signal blocked, so SIGTERM still reaches the main thread.
extern "C" {
// The name and type are jemalloc's: it reads this symbol when it starts.
const char* malloc_conf = "background_thread:true";
}
