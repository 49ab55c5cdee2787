import type { Dtype } from '../contracts/tensor.ts';
import { FleetError } from '../errors/fleet-error.ts';

/**
 * Wire dtype <-> aclDataType (values from the ACL headers, reference/acl-api.md §1.3) and element
 * sizes. The binding reports numeric aclDataType values; only this table turns them into names.
 */
export const ACL_DTYPES: Readonly<Record<Dtype, { readonly aclDataType: number; readonly elementBytes: number }>> = {
  float32: { aclDataType: 0, elementBytes: 4 }, // ACL_FLOAT
  float16: { aclDataType: 1, elementBytes: 2 }, // ACL_FLOAT16 (raw bits)
  int8: { aclDataType: 2, elementBytes: 1 }, // ACL_INT8
  int32: { aclDataType: 3, elementBytes: 4 }, // ACL_INT32
  uint8: { aclDataType: 4, elementBytes: 1 }, // ACL_UINT8
  int64: { aclDataType: 9, elementBytes: 8 }, // ACL_INT64
  bool: { aclDataType: 12, elementBytes: 1 }, // ACL_BOOL
};

const BY_ACL = new Map<number, Dtype>(
  (Object.entries(ACL_DTYPES) as Array<[Dtype, { aclDataType: number }]>).map(([name, v]) => [v.aclDataType, name]),
);

export function dtypeFromAcl(aclDataType: number, tensorName: string): Dtype {
  const dtype = BY_ACL.get(aclDataType);
  if (dtype === undefined) {
    throw new FleetError(
      'MODEL_LOAD_FAILED',
      `tensor "${tensorName}" has aclDataType ${aclDataType}, which npu-fleet does not carry (supported: ${Object.keys(ACL_DTYPES).join(', ')})`,
      { details: { aclDataType, tensor: tensorName } },
    );
  }
  return dtype;
}

export function elementBytes(dtype: Dtype): number {
  return ACL_DTYPES[dtype].elementBytes;
}
