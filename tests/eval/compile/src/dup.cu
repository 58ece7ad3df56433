/* Test fixture: defines add_launch a second time (with add.cu, the link fails). */
extern "C" int add_launch(int a, int b)
{
    return a - b;
}
