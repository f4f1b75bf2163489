/* gpu-tag.c: prints the data/ folder tag of a GPU's name (gpu_tag_from_name), so the Makefile
 * and the programs name a GPU the same way. usage: gpu-tag "NVIDIA H100 80GB HBM3" -> h100 */
#include "common.h"

int main(int argc, char **argv)
{
    char tag[64];
    if (argc != 2) {
        fprintf(stderr, "usage: %s \"GPU NAME\"\n", argv[0]);
        return EXIT_USAGE;
    }
    gpu_tag_from_name(argv[1], tag, sizeof tag);
    puts(tag);
    return 0;
}
