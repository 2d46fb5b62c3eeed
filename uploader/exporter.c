/*
 * exporter.c - what every exporter shares (see exporter.h): the program's name.
 * Context: the uploader thread.
 */
#include "uploader/exporter.h"

#include <errno.h>

const char *exporter_program_name(void)
{
	return program_invocation_short_name && program_invocation_short_name[0]
		   ? program_invocation_short_name
		   : "unnamed-native-app";
}
