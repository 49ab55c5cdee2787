#include "harness.h"
void modelTests(const char *) {}
void benchMain() {}
