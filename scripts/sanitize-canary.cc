// Planted bugs for scripts/sanitize: before the real run, each is loaded into Python the way the engine is (ctypes
// here, the same preload and options) and must be reported, so a sanitizer job that silently stopped seeing bugs
// (a lost preload, reports going nowhere) fails instead of passing.
#include <climits>
#include <thread>

extern "C" {

int canary_use_after_free(int i) {
  int* a = new int[4]();
  delete[] a;
  return a[i];  // freed
}

int canary_signed_overflow(int x) { return x + INT_MAX; }  // x = 1

int canary_race(int) {
  int counter = 0;
  std::thread a([&counter] { for (int k = 0; k < 100000; ++k) ++counter; });
  std::thread b([&counter] { for (int k = 0; k < 100000; ++k) ++counter; });
  a.join();
  b.join();
  return counter;
}
}
