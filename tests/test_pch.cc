// The program braid_test_pch (tests/CMakeLists.txt) exists for its precompiled header. It is
// an executable, as the test programs are, so that its header is compiled with their options
// (-fPIE, not a library's -fPIC): gcc uses a precompiled header only under the same options.
int main() { return 0; }
