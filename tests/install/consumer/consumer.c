#include <stdio.h>

#include <braid/braid.h>

int main(void) {
  int v = 0;
  if (braidGetVersion(&v) != braidSuccess) return 1;
  printf("consumer_c: braid %d\n", v);
  return v == BRAID_VERSION_CODE ? 0 : 1;
}
