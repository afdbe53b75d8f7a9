// Work that must run at exit() before other libraries' static objects are destroyed: stopping the
// background compiles, which may be inside oneDNN or LLVM when a program returns from main with a
// session alive. exit() runs atexit handlers and static destructors in the reverse order of their
// registration, so a library whose statics are first built after a handler was registered is torn
// down before the handler runs. at_exit_refresh() registers the handler again after such a first
// use (a library loaded, a first primitive built): the newest registration runs first, and the
// work itself runs once.
#pragma once

namespace terrace {

// Adds `fn` to the work run at exit, before the statics built so far are destroyed.
void at_exit_first(void (*fn)());
// Registers the handler again, so that it also runs before the statics built since.
void at_exit_refresh();

}  // namespace terrace
