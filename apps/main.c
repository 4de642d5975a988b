#include "neargnn.h"
#include <stdio.h>
int main(void) { printf("neargnn %s\n", ng_version()); return 0; }
