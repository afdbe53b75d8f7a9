// Work that must run at exit() before other libraries' static objects are destroyed: stopping the
// background compiles, which may be inside oneDNN or LLVM when a program returns from main with a
// session alive. exit() first runs the exiting thread's thread_local destructors, then atexit
// handlers and static destructors in the reverse order of their registration. So the work runs
// from the destructor of a thread_local object of the main thread (made by at_exit_first or
// at_exit_refresh called there): before every static destructor, whatever was built when. For an
// exit() from another thread, an atexit handler is registered too, and again after a library's
// first use (at_exit_refresh: a library loaded, a first primitive built), so that it runs before
// the statics built so far are destroyed. The work runs once.
#pragma once

namespace terrace {

// Adds `fn` to the work run at exit, before the statics built so far are destroyed.
void at_exit_first(void (*fn)());
// Registers the handler again, so that it also runs before the statics built since; on the main
// thread, also makes the thread_local that runs the work first.
void at_exit_refresh();

}  // namespace terrace
