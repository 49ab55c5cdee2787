#include "harness.h"
void opTests(const char *) {}
