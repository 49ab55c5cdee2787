// Models and helpers shared by the whole-model test files (test_model*.cc).
#pragma once
#include <cstdint>
#include <string>

#include "harness.h"

// Hand-built ONNX models (bytes): an MLP and a small CNN with a dynamic batch, and a text
// classifier with dynamic batch and sequence length.
std::string mlpModel(int64_t in = 784, int64_t h1 = 256, int64_t h2 = 128, int64_t out = 10);
std::string cnnModel();
std::string textModel(int64_t opset = 13);
HostT tokens(int64_t b, int64_t s, uint32_t seed);

/** Device buffers and datasets for a loaded dynamic-batch model: input 0, the 8-byte batch input, output 0. */
struct DynBatchIO {
  aclmdlDesc *d;
  void *a, *b, *c;
  aclmdlDataset *in, *out;
};
DynBatchIO dynBatchIO(uint32_t id);

// Test bodies, run by modelTests (test_models.cc).
void dynamicBatch();         // test_model_dynamic.cc
void rangeDynamic();         // test_model_dynamic.cc
void curDimsAtRun();         // test_model_dynamic.cc
void malformed();            // test_model_malformed.cc
void memoryAccounting();     // test_model_resources.cc
void memoryCapacity();       // test_model_resources.cc
void timeModelAndFaults();   // test_model_resources.cc
void manyExecutions();       // test_model_resources.cc
void exitWhileHung();        // test_model_resources.cc
void concurrency();          // test_model_concurrency.cc
void validationDataDependent();  // test_model_validation.cc
void validationBudget();         // test_model_validation.cc
void validationBudgetScales();   // test_model_validation.cc
