/* objfile.c -- what an object file defines, read with LLVM's object API
 * (a custom op's compiled kernel must define nnsc_custom_NAME; driver.c).
 * Apart from link.c so that what links link.c alone (the CUDA op test)
 * needs no libLLVM. */
#include <string.h>

#include <llvm-c/Core.h>
#include <llvm-c/Object.h>

#include "codegen.h"

/* Whether object file obj defines symbol sym (in one of its sections):
 * 1, 0, or -1 when obj cannot be read as an object file. */
int cg_object_defines(const char *obj, const char *sym) {
    LLVMMemoryBufferRef mb;
    char *msg = NULL;
    if (LLVMCreateMemoryBufferWithContentsOfFile(obj, &mb, &msg)) {
        LLVMDisposeMessage(msg);
        return -1;
    }
    LLVMBinaryRef bin = LLVMCreateBinary(mb, NULL, &msg);
    if (!bin) {
        LLVMDisposeMessage(msg);
        LLVMDisposeMemoryBuffer(mb);
        return -1;
    }
    LLVMSymbolIteratorRef si = LLVMObjectFileCopySymbolIterator(bin);
    LLVMSectionIteratorRef sec = LLVMObjectFileCopySectionIterator(bin);
    int found = 0;
    for (; !found && !LLVMObjectFileIsSymbolIteratorAtEnd(bin, si); LLVMMoveToNextSymbol(si)) {
        const char *n = LLVMGetSymbolName(si);
        if (!n || strcmp(n, sym) != 0) continue;
        LLVMMoveToContainingSection(sec, si);   /* undefined: no section */
        found = !LLVMObjectFileIsSectionIteratorAtEnd(bin, sec);
    }
    LLVMDisposeSectionIterator(sec);
    LLVMDisposeSymbolIterator(si);
    LLVMDisposeBinary(bin);
    LLVMDisposeMemoryBuffer(mb);
    return found;
}

