// What both families' uploads share: the account's storage quota (files and voice samples are one sum).
import type { Services } from '../services.js';
import { storageQuotaExceeded } from '../errors.js';
import { storageUsed, type StorageQuota } from '../store/files.js';

/**
 * The account's storage quota for an upload: refused at once when the account is at it already, or
 * when the declared body alone would pass it (nothing is read or stored); else counted as it is stored.
 */
export async function uploadQuota(s: Pick<Services, 'db' | 'config'>, accountId: string, declared: number, param: string): Promise<StorageQuota> {
  const quota = s.config.limits.storageBytesPerAccount;
  const used = await storageUsed(s.db, accountId);
  if (used >= quota || used + declared > quota) throw storageQuotaExceeded(quota, used + Math.max(declared, 1), param);
  return { bytes: quota, refuse: (total) => storageQuotaExceeded(quota, total, param) };
}
